"""Verdicts: a run against a published card (reproduce) and runs against each other (compare)."""
