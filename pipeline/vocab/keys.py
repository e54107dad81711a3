"""Metric, param and tag keys shared by the writer (pipeline.tracking) and readers (analysis).

Pure constants, no imports: the analysis side reads MLflow through these names and never
parses run names or logs. Curves are logged against the optimizer step (and the losses
again against tokens, the by_tokens/ keys).
"""

# --- per-step curves (logged against the step) ------------------------------------------
TRAIN_LOSS = "train/loss"  # mean training cross-entropy over the last log interval, nats/token
TRAIN_LR = "train/lr"  # learning rate at that step
VAL_LOSS = "val/loss"  # validation cross-entropy on the fixed eval batches, nats/token
VAL_BPB = "val/bpb"  # the same in bits per UTF-8 byte, so tokenizers compare
VAL_ACCURACY = "val/accuracy"  # classify (vit): share of validation images classified right
TOKENS = "tokens"  # tokens consumed by the optimizer so far (step x batch x seq_len)
THROUGHPUT = "throughput/tokens_per_s"  # training tokens per wall-clock second
# The same losses with the step axis in tokens (MLflow's x axis is the step): the curves of
# one IsoFLOP budget overlay in the UI even where batch sizes, hence steps, differ.
VAL_LOSS_BY_TOKENS = "by_tokens/val_loss"
TRAIN_LOSS_BY_TOKENS = "by_tokens/train_loss"

# --- summary of a finished run (logged once, at the end) -----------------------------------
FINAL_VAL_LOSS = "final/val_loss"
FINAL_VAL_BPB = "final/val_bpb"
FINAL_VAL_ACCURACY = "final/val_accuracy"
FINAL_TRAIN_LOSS = "final/train_loss"
FINAL_TOKENS = "final/tokens"  # D: tokens actually consumed
FINAL_STEPS = "final/steps"
# unique tokens available: the train split's length, or the run's share of it
# (DataSpec.train_fraction < 1)
TRAIN_SPLIT_TOKENS = "data/train_tokens"
FINAL_EPOCHS = "final/epochs"  # D / data/train_tokens: passes over the train split
FINAL_UNIQUE_TOKENS = "final/unique_tokens"  # distinct train-split tokens the run trained on
FINAL_PATCH_TOKENS = "final/patch_tokens"  # vit: images x (patches + [CLS]), the tokens read
FINAL_WALL_S = "final/wall_s"  # training wall time of this attempt chain, seconds
FINAL_TOKENS_PER_S = "final/tokens_per_s"
PARAMS_TOTAL = "model/params_total"  # N, Chinchilla's convention (all parameters)
PARAMS_NON_EMBEDDING = "model/params_non_embedding"  # N, Kaplan's convention
# C under each FLOP convention of pipeline.vocab.flops (training FLOPs = fwd + bwd).
FLOPS_PREFIX = "final/flops_"  # + convention name, e.g. final/flops_exact, final/flops_6nd

# --- tags ----------------------------------------------------------------------------------
TAG_SWEEP = "sweep"  # sweep name (= MLflow experiment name)
TAG_RUN_ID = "run_id"  # stable hash of the resolved RunSpec
TAG_FAMILY = "family"
TAG_BUDGET = "budget"  # planned compute budget C (FLOPs) of an isoflop cell, else ""
TAG_STATUS = "status"  # one of STATUSES
TAG_KIND = "kind"  # "sweep" on the parent run, "trial" on child runs
TAG_SWEEP_RUN = "sweep_run"  # on a child run: the MLflow id of its sweep's parent run
TAG_ATTEMPTS = "attempts"  # how many times this run_id was started
TAG_DIVERGED_STEP = "diverged_at_step"
TAG_RESUMED_FROM = "resumed_from_step"  # checkpoint step the last attempt started from
TAG_STOPPED_AT = "stopped_at_step"  # step an attempt stopped on request at (and checkpointed)
TAG_DATA_FINGERPRINT = "data_fingerprint"  # sha256 of corpus + tokenizer + split: the tokens
TAG_CORPUS_FINGERPRINT = "corpus_fingerprint"  # sha256 of the corpus files alone
TAG_ERROR = "error"  # one-line reason of a failure (the traceback is an artifact)
TAG_GIT_COMMIT = "git_commit"  # commit of the code that planned the run ("" outside a checkout)
TAG_GIT_DIRTY = "git_dirty"  # "true" when that checkout had uncommitted changes
TAG_PYTHON = "python_version"
TAG_TORCH = "torch_version"
TAG_PRECISION = "precision"  # what the run trains in on its device: "bf16" (autocast) or "fp32"
TAG_ROLE = "role"  # ROLE_MAIN (fitted) or ROLE_HOLDOUT (kept out of every fit, predicted)
TAG_BRANCH_OF = "branch_of"  # WSD reuse: run_id of the trunk whose stable-phase state it starts from
TAG_BRANCH_STEP = "branch_step"  # WSD reuse: the trunk step this run was branched at

ROLE_MAIN = "main"
ROLE_HOLDOUT = "holdout"
ROLES = (ROLE_MAIN, ROLE_HOLDOUT)

STATUS_RUNNING = "running"
STATUS_FINISHED = "finished"
STATUS_DIVERGED = "diverged"
STATUS_FAILED = "failed"
STATUS_KILLED = "killed"
STATUSES = (STATUS_RUNNING, STATUS_FINISHED, STATUS_DIVERGED, STATUS_FAILED, STATUS_KILLED)

SPEC_ARTIFACT = "spec.json"  # the resolved RunSpec, as an artifact of each child run
CURVE_ARTIFACT = "curve.json"  # eval curve as one artifact too: a cheap bulk read for analysis
TAG_CURVE = "curve_json"
"""The same curve inline, as a tag (when it fits MLflow's 8000-character tag limit): a sweep's
runs and their curves then come back from one search_runs query, not one artifact download
per run (issue 21: 2,000 runs with curves took 30 s)."""
CURVE_TAG_MAX_CHARS = 8000  # mlflow.utils.validation.MAX_TAG_VAL_LENGTH (MLflow 3.x)
TAG_SAMPLE = "sample"
"""A finished causal run's text: SAMPLE_PROMPT and SAMPLE_NEW_TOKENS tokens sampled from the
final weights (pipeline.train.passes.sample_tags). The report shows it for the smallest and
the largest model instead of starting `python -m pipeline.sample` for each (~5 s of imports
and loading per sample; issue 21); the MLflow UI shows it beside every run."""
TAG_SAMPLE_PROMPT = "sample_prompt"  # the prompt TAG_SAMPLE continues
SAMPLE_PROMPT = "def "  # the report's default prompt (byte-level Python: a function begins)
SAMPLE_NEW_TOKENS = 200
SAMPLE_TEMPERATURE = 0.8  # how the report's samples (and pipeline.sample by default) are drawn
SAMPLE_TOP_K = 50
SAMPLE_SEED = 0


def flops_key(convention: str) -> str:
    return FLOPS_PREFIX + convention

# --- the sweep's parent run ----------------------------------------------------------------
PLAN_ARTIFACT = "plan.json"  # the plan manifest (pipeline.vocab.manifest) of the last launch
