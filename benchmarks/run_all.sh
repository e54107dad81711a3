#!/usr/bin/env bash
# All CPU benchmarks of BENCHMARKS.md in turn (~25-30 minutes on 2 shared cores); each output
# is also saved to benchmarks/results/<name>.txt. Each benchmark runs alone with one command:
#   python benchmarks/bench_throughput.py   (see the docstring at the top of each file)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results
for name in throughput reference attempts bf16_loss parallel sweep growth; do
    extra=()
    if [[ $name == attempts ]]; then extra=(--compile); fi
    echo "== bench_$name"
    python "benchmarks/bench_$name.py" "${extra[@]}" 2>&1 | tee "benchmarks/results/$name.txt"
done
