"""Analysis of scaling sweeps: Kaplan and Chinchilla fits with bootstrap intervals.

Pure numpy/scipy/pandas (never torch). Entry points:
  analysis.load.load_sweep / load_csv   runs -> RunsTable (+ training curves)
  analysis.analyze.analyze              every fit, interval, comparison and check -> Analysis
  analysis.fits                         the individual fits and their typed results
  python -m analysis.fit / analysis.predict   the command lines (docs/analysis.md)
  python -m analysis.report             figures + report.md/report.html (README: Reading a report)
"""
