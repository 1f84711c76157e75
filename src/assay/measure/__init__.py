"""Measurements after (or beside) a run: comparisons, the final verification, chains."""
