#!/usr/bin/env bash
# GPU check: a fractional-GPU sweep on this machine, in about two minutes (under five).
#
#   bash benchmarks/gpu/gpu_check.sh          # from the repository root, package installed
#
# Writes a sweep of 8 small GPT runs with `num_gpus: 0.25` to a temp folder and runs it with
# a local Ray (the same code path as a cluster node), then checks that:
#   - every run finished and learned (val loss below ln 256),
#   - every run was given a GPU by Ray (its `cuda_visible_devices` tag, set from what Ray put
#     in CUDA_VISIBLE_DEVICES for the task) and trained there (device "auto" -> cuda:0 of
#     the task),
#   - several runs shared one GPU at the same time (nvidia-smi sampled every 0.5 s), which is
#     what a fractional num_gpus is for.
# Exits 1 with a message where torch sees no CUDA GPU; 2 when a check fails.
# Env: PYTHON (default: python), GPU_CHECK_KEEP=1 keeps the temp folder.
set -euo pipefail

PY=${PYTHON:-python}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA GPU here (torch $("$PY" -c 'import torch; print(torch.__version__)' \
        2>/dev/null || echo 'not importable') sees none); this check needs one. Nothing run." >&2
    exit 1
fi

tmp=$(mktemp -d /tmp/gpuchk.XXXXXX)  # short: Ray's socket paths must fit in 107 characters
sampler=""
cleanup() {
    if [[ -n "$sampler" ]]; then kill "$sampler" 2>/dev/null || true; fi
    if [[ "${GPU_CHECK_KEEP:-0}" != 1 ]]; then rm -rf "$tmp"; else echo "kept $tmp"; fi
}
trap cleanup EXIT

cat > "$tmp/gpu_check.yaml" <<'YAML'
# benchmarks/gpu/gpu_check.sh: 8 small runs, a quarter of a GPU each (4 share a GPU at a time)
name: gpu_check
kind: isoflop
family: gpt
shape:
  head_dim: 16
data:
  corpus: stdlib
  max_bytes: 2000000
  seq_len: 64
train:
  batch_size: 16
  lr: 3.0e-3
  evals_per_run: 4
  eval_batches: 4
resources:
  num_cpus: 1
  num_gpus: 0.25
isoflop:
  budgets: [5e11, 1e12]
  sizes:
    shapes:
      - {n_layer: 2, d_model: 32}
      - {n_layer: 2, d_model: 48}
      - {n_layer: 2, d_model: 64}
      - {n_layer: 3, d_model: 64}
YAML

# Everything of this check stays in the temp folder; a local Ray, not a cluster in RAY_ADDRESS.
unset RAY_ADDRESS
export MLFLOW_TRACKING_URI="sqlite:///$tmp/mlflow.db" SCALING_CHECKPOINT_DIR="$tmp/ckpt" \
    SCALING_CACHE_DIR="$tmp/cache" RAY_TMPDIR="$tmp/ray" RAY_USAGE_STATS_ENABLED=0
mkdir -p "$RAY_TMPDIR"

# Peak number of processes on any one GPU, sampled while the sweep runs.
if command -v nvidia-smi >/dev/null; then
    (
        peak=0
        while true; do
            n=$(nvidia-smi --query-compute-apps=gpu_uuid --format=csv,noheader 2>/dev/null \
                | sort | uniq -c | awk 'BEGIN {m = 0} $1 > m {m = $1} END {print m}' || true)
            if (( ${n:-0} > peak )); then peak=$n; echo "$peak" > "$tmp/peak"; fi
            sleep 0.5
        done
    ) &
    sampler=$!
fi

start=$(date +%s)
if ! timeout 290 "$PY" -m pipeline.sweep "$tmp/gpu_check.yaml" --no-report; then
    echo "gpu_check: FAILED: the sweep did not complete (see above)" >&2
    exit 2
fi
wall=$(( $(date +%s) - start ))

"$PY" - "$tmp" "$wall" <<'PY'
import math
import sys
from pathlib import Path

from mlflow import MlflowClient

tmp, wall = Path(sys.argv[1]), sys.argv[2]
client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
exp = client.get_experiment_by_name("gpu_check")
runs = client.search_runs([exp.experiment_id], "tags.kind = 'trial'")
problems = []
if len(runs) != 8:
    problems.append(f"{len(runs)} runs in the ledger, expected 8")
for run in runs:
    tags, loss = run.data.tags, run.data.metrics.get("final/val_loss", math.nan)
    name = run.info.run_name
    if run.info.status != "FINISHED" or tags.get("status") != "finished":
        problems.append(f"{name}: {run.info.status}/{tags.get('status')} {tags.get('error', '')}")
    if not loss < math.log(256):
        problems.append(f"{name}: val loss {loss} (did not learn)")
    gpus = tags.get("cuda_visible_devices", "unset")
    if gpus in ("", "unset"):
        problems.append(f"{name}: Ray gave it no GPU (CUDA_VISIBLE_DEVICES={gpus!r})")
    print(f"  {name:28s} GPU {gpus:>3s}  val loss {loss:.3f}  "
          f"{run.data.metrics.get('final/tokens_per_s', math.nan):,.0f} tok/s")
peak_file = tmp / "peak"
peak = int(peak_file.read_text()) if peak_file.exists() else None
if peak is None:
    print("  (nvidia-smi not available: GPU sharing not measured)")
elif peak < 2:
    problems.append(f"at most {peak} run(s) on a GPU at a time: fractional GPUs did not pack")
shared = "" if peak is None else f", at most {peak} runs on one GPU at once"
print(f"gpu_check: {len(runs)} runs in {wall}s{shared}")
if problems:
    print("gpu_check: FAILED\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(2)
print("gpu_check: OK")
PY
