"""RecBole models built from the parts in :mod:`recbole_ext.nn`; the only package that knows
RecBole's model contract (``calculate_loss``, ``predict``, ``full_sort_predict``).

Backbone families live one per file (``backbone_*.py``) and register themselves on import; paper
models are presets: YAML files in ``presets/`` (see :mod:`recbole_ext.models.presets`).
"""
import importlib
import pkgutil

from recbole_ext.models.backbones import BACKBONE, Backbone


def _register_backbone_modules() -> None:
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("backbone_"):
            importlib.import_module(f"{__name__}.{module.name}")


_register_backbone_modules()

from recbole_ext.models.seq_transformer import SeqTransformer  # noqa: E402

__all__ = ["BACKBONE", "Backbone", "SeqTransformer"]
