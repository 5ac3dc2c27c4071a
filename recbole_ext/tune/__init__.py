"""Hyperparameter sweeps with Ray Tune over :func:`recbole_ext.runner.run` (``recbole-ext tune``).

Ray is optional (``pip install recbole-ext[tune]``) and imported only when a sweep starts.
"""
from recbole_ext.tune.cli import add_tune_command

__all__ = ["add_tune_command"]
