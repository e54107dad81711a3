"""The shared vocabulary: what a run is (spec, family, shape, recipe), how its FLOPs are
counted, the ledger's key names, the plan manifest, where a store lives and how a full
disk is said.

Both sides import it: the planner and the run side (pipeline/) and the analysis (analysis/).
It imports nothing else of the project and no torch, MLflow, Ray or pydantic, so the analysis
can read what the planner meant without importing the planner (docs/architecture.md;
tests/test_architecture.py checks both rules).
"""
