"""Moved to ``analysis.runs.load``; this name stays for ``pipeline.holdout``, which imports
``analysis.load`` (pipeline/ is refactored separately). Remove once it imports the new path.
"""

from analysis.runs.load import load_sweep

__all__ = ["load_sweep"]
