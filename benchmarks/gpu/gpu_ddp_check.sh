#!/usr/bin/env bash
# Data-parallel check (issue 18): one run trained by 2 workers, DDP then FSDP, against the same
# run on 1 worker, through `python -m pipeline.sweep` with a local Ray.
#
#   bash benchmarks/gpu/gpu_ddp_check.sh              # needs 2 CUDA GPUs: NCCL, one GPU a worker
#   DDP_CHECK_CPU=1 bash benchmarks/gpu/gpu_ddp_check.sh  # the same on 2 CPUs with gloo (~2 min)
#
# Checks that every run finished, the 2-worker runs wrote one validation point per
# evaluation (rank 0 alone writes), and their final losses are within 1% of the one-worker
# run's (bf16 autocast on GPUs: the summation order of 2 half-batches moves the loss more than
# fp32's 1e-7 of tests/test_parallel.py). Prints the three losses.
# Exits 1 where there are not 2 GPUs (and DDP_CHECK_CPU is not set); 2 when a check fails.
# Env: PYTHON (default: python), GPU_CHECK_KEEP=1 keeps the temp folder.
set -euo pipefail

PY=${PYTHON:-python}
if [[ "${DDP_CHECK_CPU:-0}" == 1 ]]; then
    gpus=0 cpus=2
else
    n=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
    if (( n < 2 )); then
        echo "gpu_ddp_check: $n CUDA GPU(s) here; this check needs 2 (DDP_CHECK_CPU=1 runs it" \
             "on 2 CPUs with gloo). Nothing run." >&2
        exit 1
    fi
    gpus=1 cpus=$(( $(nproc) < 8 ? $(nproc) : 8 ))
fi

tmp=$(mktemp -d /tmp/ddpchk.XXXXXX)  # short: Ray's socket paths must fit in 107 characters
cleanup() { if [[ "${GPU_CHECK_KEEP:-0}" != 1 ]]; then rm -rf "$tmp"; else echo "kept $tmp"; fi; }
trap cleanup EXIT
unset RAY_ADDRESS
export MLFLOW_TRACKING_URI="sqlite:///$tmp/mlflow.db" SCALING_CHECKPOINT_DIR="$tmp/ckpt" \
    SCALING_CACHE_DIR="$tmp/cache" RAY_TMPDIR="$tmp/ray" RAY_USAGE_STATS_ENABLED=0
mkdir -p "$RAY_TMPDIR"

write_sweep() {  # name workers sharding
    cat > "$tmp/$1.yaml" <<YAML
name: $1
kind: isoflop
family: gpt
shape: {head_dim: 16}
data: {corpus: stdlib, max_bytes: 2000000, seq_len: 64}
train: {batch_size: 16, lr: 3.0e-3, evals_per_run: 4, eval_batches: 4}
resources: {num_cpus: 1, num_gpus: $gpus, workers_per_run: $2, sharding: $3}
isoflop:
  budgets: [1e12]
  sizes: {shapes: [{n_layer: 2, d_model: 64}]}
YAML
}
write_sweep ddp_one 1 ddp
write_sweep ddp_two 2 ddp
write_sweep fsdp_two 2 fsdp
for name in ddp_one ddp_two fsdp_two; do
    echo "== $name"
    "$PY" -m pipeline.sweep "$tmp/$name.yaml" --cpus "$cpus" --no-report --quiet
done

"$PY" - "$MLFLOW_TRACKING_URI" <<'PY'
import sys

from mlflow import MlflowClient

from pipeline.vocab import keys

client = MlflowClient(tracking_uri=sys.argv[1])
losses, problems = {}, []
for name in ("ddp_one", "ddp_two", "fsdp_two"):
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'trial'") if exp else []
    if len(runs) != 1 or runs[0].data.tags.get(keys.TAG_STATUS) != keys.STATUS_FINISHED:
        problems.append(f"{name}: not one finished run")
        continue
    run = runs[0]
    steps = [p.step for p in client.get_metric_history(run.info.run_id, keys.VAL_LOSS)]
    if steps != sorted(set(steps)):
        problems.append(f"{name}: validation steps {steps} (one writer expected)")
    losses[name] = run.data.metrics[keys.FINAL_VAL_LOSS]
print("final val loss: " + ", ".join(f"{k} {v:.5f}" for k, v in losses.items()))
for name in ("ddp_two", "fsdp_two"):
    if name in losses and "ddp_one" in losses:
        rel = abs(losses[name] / losses["ddp_one"] - 1)
        if rel > 0.01:
            problems.append(f"{name}: {rel:.2%} from one worker (> 1%)")
for p in problems:
    print(f"gpu_ddp_check: {p}", file=sys.stderr)
sys.exit(2 if problems else 0)
PY
echo "gpu_ddp_check: ok"
