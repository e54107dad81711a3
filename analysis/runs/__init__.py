"""The runs: the table, loading it, which runs are fitted, the plan, synthetic data, shapes."""
