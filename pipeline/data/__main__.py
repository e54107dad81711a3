"""Prepare a sweep's tokens ahead of the sweep: `python -m pipeline.data prepare SWEEP_FILE`.

The sweep itself builds them when they are missing, but a large corpus takes minutes to hours
(BENCHMARKS.md, data preparation): this does it on its own, with a progress bar, on the
machine and cache folder the sweep will use. The sweep then finds the entry and only maps it.
Killed, it leaves no entry (and no partial one): the next call starts that step again.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.vision.sources import is_image_corpus


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.data",
                                description="Prepare the token cache of a sweep's data section.")
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="tokenize a sweep's corpus into the cache")
    prep.add_argument("sweep_file")
    prep.add_argument("--cache-dir", default=None,
                      help="token cache folder (default: $SCALING_CACHE_DIR, else "
                           "~/.cache/scaling-pipeline): the one the sweep's workers read")
    prep.add_argument("--json", action="store_true",
                      help="progress on stderr; stdout is one JSON object describing the entry")
    args = p.parse_args(argv)

    from pipeline.config import SweepError, load_sweep
    from pipeline.data.files import DiskFullError
    from pipeline.data.settings import DataConfig, DataError
    from pipeline.data.store import prepare_data
    from pipeline.planner import data_spec_for

    try:
        cfg = load_sweep(args.sweep_file)
        spec = data_spec_for(cfg, args.sweep_file)
        config = DataConfig(**asdict(spec), cache_dir=args.cache_dir)
    except (SweepError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = sys.stderr if args.json else sys.stdout
    if is_image_corpus(spec.corpus):  # nothing to cache: images are read whole (small)
        return _check_images(spec, args, out)
    try:
        data = prepare_data(config, progress=lambda line: print(f"data: {line}", file=out,
                                                                 flush=True))
    except DataError as e:
        print(f"error: {args.sweep_file}: data: {e}", file=sys.stderr)
        return 2
    except DiskFullError as e:
        print(f"error: {args.sweep_file}: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stopped: no entry was kept; run the same command to start again",
              file=sys.stderr)
        return 130
    meta = json.loads(Path(data.cache_path).with_suffix(".json").read_text())
    if args.json:
        print(json.dumps({"cache_path": data.cache_path, "built": data.built, **meta}, indent=1))
    else:
        print(f"ready: {data.cache_path} ({meta['train_tokens']:,} train and "
              f"{meta['val_tokens']:,} validation tokens)")
    return 0


def _check_images(spec, args: argparse.Namespace, out) -> int:
    """An image corpus is not cached; `prepare` reads it once to check it and says so."""
    from pipeline.data.settings import DataError
    from pipeline.vision.data import load_images

    try:
        data = load_images(spec)
    except DataError as e:
        print(f"error: {args.sweep_file}: data: {e}", file=sys.stderr)
        return 2
    summary = {"corpus": spec.corpus, "fingerprint": data.fingerprint, "cached": False,
               "train_images": len(data.train), "val_images": len(data.val),
               "classes": data.vocab_size}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"ready: {spec.corpus}: {data.note}; {len(data.train):,} train and "
              f"{len(data.val):,} validation images (not cached: read whole by each run)",
              file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
