"""The numerics every fit shares, none of which is a scaling law: the bootstrap over runs and
its percentile intervals (bootstrap), the batched solvers that refit all of a bootstrap's
resamples at once (batched), BLAS held to one thread while fitting (threads), and the process
pool the resamples run in (workers). Apart from fits/ so that fits/ holds the laws only, and
so that the checks, the report and the comparison use this machinery without reaching into
the fits."""
