"""`python -m pipeline.train ...`: the single-run CLI (pipeline/train/cli.py)."""

from pipeline.train.cli import main

raise SystemExit(main())
