#!/usr/bin/env bash
# Every CPU performance benchmark in turn: the speed, memory and throughput of this code (all of
# benchmarks/perf/, plus the --speed half of studies/bench_bf16_parity.py). Each output is also
# saved to benchmarks/results/<name>.txt, replacing the committed one (the figures of
# BENCHMARKS.md come from those files: `git diff benchmarks/results` compares). Roughly 70
# minutes on 2 otherwise idle cores, more on a shared machine (the minutes below are per
# benchmark); bench_prepare's corpus takes 2 GB of disk in a temp folder, removed at the end.
#
#   bash benchmarks/run_all.sh                      # all, in the order below
#   bash benchmarks/run_all.sh fits ledger_load     # only these (names from the list below)
#   REPORT_BASELINE=eba3d83 bash benchmarks/run_all.sh report_chinchilla   # default: HEAD
#
# A benchmark that fails is named at the end (exit 1); the others still run. Each also runs
# alone, e.g. `python benchmarks/perf/bench_throughput.py`: the docstring at the top of each
# file says what it measures and which options it has.
#
# Not run here, each on its own (benchmarks/README.md):
#   studies (a statistical or scaling question; minutes to hours each), e.g.
#     python benchmarks/studies/bench_bf16_loss.py
#     python benchmarks/studies/bench_eval_noise.py
#     python benchmarks/studies/bench_compare.py
#     python benchmarks/studies/seed_effects.py
#   GPU checks, on a machine with CUDA (without one they say so, run nothing and exit non-zero):
#     python benchmarks/gpu/gpu_throughput.py
#     bash benchmarks/gpu/gpu_check.sh
#     bash benchmarks/gpu/gpu_ddp_check.sh        # DDP_CHECK_CPU=1: the same on 2 CPUs (gloo)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/results
corpus_dir=$(mktemp -d)
trap 'rm -rf "$corpus_dir"' EXIT
corpus="$corpus_dir/corpus2g.jsonl"
baseline=${REPORT_BASELINE:-HEAD}

# name (benchmarks/results/<name>.txt) | command from the repository root (split on spaces)
BENCHMARKS=(
    "throughput|python benchmarks/perf/bench_throughput.py"         # ~4 min
    "reference|python benchmarks/perf/bench_reference.py"           # ~3 min
    "attempts|python benchmarks/perf/bench_attempts.py --compile"   # ~8 min
    "bf16_speed|python benchmarks/studies/bench_bf16_parity.py --speed"   # ~6 min
    "parallel|python benchmarks/perf/bench_parallel.py"             # ~3 min
    "sweep|python benchmarks/perf/bench_sweep.py"                   # ~4 min
    "growth|python benchmarks/perf/bench_growth.py"                 # ~4 min
    "memory|python benchmarks/perf/bench_memory.py"                 # ~1 min
    "compile|python benchmarks/perf/bench_compile.py"               # ~1.5 min
    "ddp|python benchmarks/perf/bench_ddp.py"                       # ~3 min
    "whole_run|python benchmarks/perf/bench_whole_run.py"           # ~8 min (15 if shared)
    "fits|python benchmarks/perf/bench_fits.py"                     # ~1 min
    "kaplan_jacobian|python benchmarks/perf/bench_kaplan_jacobian.py"   # seconds
    "ledger_load|python benchmarks/perf/bench_ledger_load.py"       # ~1-2 min
    # the report, the baseline commit's against this checkout's, alternated: ~3 min
    "report_chinchilla|python benchmarks/perf/bench_report.py --baseline $baseline
        --export reports/chinchilla/runs_export.json --sweep-file sweeps/chinchilla.yaml
        --bootstrap 1000 --rounds 2"
    # data preparation on a generated 2 GB corpus (made first, ~1 min): ~12 min
    "prepare|python benchmarks/perf/bench_prepare.py $corpus --kill-after 90"
)

names=()
for entry in "${BENCHMARKS[@]}"; do names+=("${entry%%|*}"); done
for want in "$@"; do
    if [[ " ${names[*]} " != *" $want "* ]]; then
        echo "run_all.sh: no benchmark named '$want'; the names: ${names[*]}" >&2
        exit 2
    fi
done

failed=()
for entry in "${BENCHMARKS[@]}"; do
    name=${entry%%|*}
    if (( $# )) && [[ " $* " != *" $name "* ]]; then continue; fi
    read -r -d '' -a cmd <<< "${entry#*|}" || true
    if [[ $name == prepare ]]; then
        echo "== make_corpus (for prepare)"
        if ! python benchmarks/tools/make_corpus.py "$corpus" --gigabytes 2; then
            failed+=("$name")
            continue
        fi
    fi
    echo "== $name: ${cmd[*]}"
    if ! "${cmd[@]}" 2>&1 | tee "benchmarks/results/$name.txt"; then failed+=("$name"); fi
done
if (( ${#failed[@]} )); then
    echo "run_all.sh: failed: ${failed[*]} (their output is in benchmarks/results/)" >&2
    exit 1
fi
