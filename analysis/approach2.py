"""Moved to ``analysis.fits.approach2``; this name stays for ``pipeline.holdout``, which imports
``analysis.approach2`` (pipeline/ is refactored separately). Remove once it imports the new path.
"""

from analysis.fits.approach2 import fit_approach2

__all__ = ["fit_approach2"]
