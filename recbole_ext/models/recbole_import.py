"""Map RecBole SASRec / BERT4Rec weights onto SeqTransformer (same model, other parameter names).

Lets a user continue from a RecBole-trained checkpoint, and is how the parity tests and the
step benchmark start both implementations from identical weights.
"""
from __future__ import annotations

import re

import torch

_RENAMES = [
    (r"^position_embedding\.", "position.position_embedding."),
    (r"^LayerNorm\.", "input_norm."),
    (r"^trm_encoder\.layer\.(\d+)\.multi_head_attention\.LayerNorm\.", r"encoder.blocks.\1.attention_norm."),
    (r"^trm_encoder\.layer\.(\d+)\.multi_head_attention\.", r"encoder.blocks.\1.attention."),
    (r"^trm_encoder\.layer\.(\d+)\.feed_forward\.LayerNorm\.", r"encoder.blocks.\1.ffn_norm."),
    (r"^trm_encoder\.layer\.(\d+)\.feed_forward\.", r"encoder.blocks.\1.ffn."),
    (r"^output_(ffn|ln|bias)", r"backbone.output_\1"),
]
SUPPORTED = ("SASRec", "BERT4Rec")


def state_dict_from_recbole(state_dict: dict[str, torch.Tensor], model_name: str) -> dict[str, torch.Tensor]:
    """RecBole ``SASRec``/``BERT4Rec`` state dict → SeqTransformer's (backbone sasrec/bert4rec)."""
    if model_name not in SUPPORTED:
        raise ValueError(f"can map {', '.join(SUPPORTED)} weights, not {model_name!r}")
    mapped = {}
    for name, tensor in state_dict.items():
        for pattern, replacement in _RENAMES:
            name, count = re.subn(pattern, replacement, name)
            if count:
                break
        mapped[name] = tensor
    return mapped
