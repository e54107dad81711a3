"""Analysis of scaling sweeps: Kaplan and Chinchilla fits with bootstrap intervals.

Pure numpy/scipy/pandas (never torch). Entry points:
  analysis.runs.load.load_sweep / load_csv   runs -> RunsTable (+ training curves)
  analysis.analyze.analyze              every fit, interval, comparison and check -> Analysis
  analysis.runs / fits / checks / reporting   the runs, the fits, the checks, the report parts
  analysis.numerics                     bootstrap, batched solver, worker pool, BLAS threads
  python -m analysis.fit / analysis.predict   the command lines (docs/analysis.md)
  python -m analysis.report             figures + report.md/report.html (README: Reading a report)
"""
