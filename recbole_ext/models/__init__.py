"""RecBole models built from the parts in :mod:`recbole_ext.nn`; the only package that knows
RecBole's model contract (``calculate_loss``, ``predict``, ``full_sort_predict``)."""
from recbole_ext.models.backbones import BACKBONE, Backbone
from recbole_ext.models.seq_transformer import SeqTransformer

__all__ = ["BACKBONE", "Backbone", "SeqTransformer"]
