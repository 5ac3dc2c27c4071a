"""Standard position encodings: learned absolute (SASRec/BERT4Rec), sinusoidal, none."""
from __future__ import annotations

import math

import torch
from torch import nn

from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.slots import POSITION, PositionPart


@POSITION.register("none")
class NoPosition(PositionPart):
    """No order information beyond what the attention mask implies."""


@POSITION.register("learned_absolute")
class LearnedAbsolutePosition(PositionPart):
    """A trained vector per position index, added to the item embedding (SASRec, Kang & McAuley 2018, §III-B)."""

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.position_embedding = nn.Embedding(dims.max_seq_length, dims.hidden_size)

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        length = item_embedding.size(1)
        return item_embedding + self.position_embedding.weight[:length]


def sinusoidal_table(length: int, size: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, §3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inverse_frequency = torch.exp(torch.arange(0, size, 2, dtype=torch.float32) * (-math.log(10000.0) / size))
    table = torch.zeros(length, size)
    table[:, 0::2] = torch.sin(position * inverse_frequency)
    table[:, 1::2] = torch.cos(position * inverse_frequency[: size // 2])
    return table


@POSITION.register("sinusoidal")
class SinusoidalPosition(PositionPart):
    """Fixed sinusoids added to the item embedding; nothing to train, nothing saved."""

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.register_buffer("table", sinusoidal_table(dims.max_seq_length, dims.hidden_size), persistent=False)

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        return item_embedding + self.table[: item_embedding.size(1)].to(item_embedding.dtype)
