"""Datasets: checks that a run's atomic files exist (converters come with the data issue)."""
from recbole_ext.data.checks import require_atomic_files

__all__ = ["require_atomic_files"]
