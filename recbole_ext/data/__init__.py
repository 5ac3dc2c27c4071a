"""Datasets: converters to RecBole atomic files, paper presets, and the atomic-file checks `run` uses.

Submodules: ``atomic`` (the checker), ``checks`` (what ``run`` calls), ``filters``, ``presets``,
``converters``, ``stats``, ``windows`` (one training row per user), ``cli`` (``recbole-ext data ...``).
Only the light ones are imported here.
"""
from recbole_ext.data.checks import require_atomic_files

__all__ = ["require_atomic_files"]
