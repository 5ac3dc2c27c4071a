"""Parts of the composable transformer, one file per family; no RecBole imports here.

Slots and their registries: ``ATTENTION`` (how a layer mixes positions), ``POSITION`` (how order
enters: at the input, as a rotation of queries/keys, or as a logit bias), ``AUX_LOSS`` (extra named
loss terms). Backbones know RecBole's batch fields and live in ``recbole_ext.models``.
"""
import importlib
import pkgutil

from recbole_ext.nn.context import AttentionContext, EncoderOutput, TransformerDims
from recbole_ext.nn.losses import AUX_LOSS, AuxLoss, AuxLossSpec, parse_aux_losses
from recbole_ext.nn.registry import PartSpec, Registry, parse_part_spec
from recbole_ext.nn.slots import ATTENTION, POSITION, AttentionPart, PositionPart
from recbole_ext.nn.transformer import TransformerBlock, TransformerEncoder

PART_MODULE_PREFIXES = ("attention_", "position_", "losses_")


def _register_part_modules() -> None:
    """Import every part family file (``attention_*.py``, ``position_*.py``, ``losses_*.py``) so
    their parts register; adding a family is adding a file, no list to keep in sync."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith(PART_MODULE_PREFIXES):
            importlib.import_module(f"{__name__}.{module.name}")


_register_part_modules()

__all__ = [
    "ATTENTION", "AUX_LOSS", "POSITION", "AttentionContext", "AttentionPart", "AuxLoss", "AuxLossSpec",
    "EncoderOutput", "PartSpec", "PositionPart", "Registry", "TransformerBlock", "TransformerDims",
    "TransformerEncoder", "parse_aux_losses", "parse_part_spec",
]
