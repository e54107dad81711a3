"""The report: its sections, figures, document blocks, provenance and samples."""
