#!/usr/bin/env bash
# All CPU benchmarks of BENCHMARKS.md in turn (~40 minutes on 2 shared cores); each output
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
# Data preparation on a generated 2 GB corpus (~12 minutes; 2 GB of disk in a temp folder).
corpus_dir=$(mktemp -d)
trap 'rm -rf "$corpus_dir"' EXIT
echo "== bench_prepare"
python benchmarks/make_corpus.py "$corpus_dir/corpus2g.jsonl" --gigabytes 2
python benchmarks/bench_prepare.py "$corpus_dir/corpus2g.jsonl" --kill-after 90 2>&1 \
    | tee benchmarks/results/prepare.txt
