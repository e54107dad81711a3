"""Moved to ``analysis.runs.planned``; this name stays for ``pipeline.holdout``, which imports
``analysis.planned`` (pipeline/ is refactored separately). Remove once it imports the new path.
"""

from analysis.runs.planned import restrict_to_plan

__all__ = ["restrict_to_plan"]
