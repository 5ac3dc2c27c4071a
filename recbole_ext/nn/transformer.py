"""The transformer with slots: blocks whose attention is a part, sharing one position part.

Layout is RecBole's (post-LN, as in BERT): ``h = LN(x + Dropout(Attn(x)))``,
``out = LN(h + Dropout(W2 act(W1 h)))``. The order of dropout calls matches RecBole's, so with the
same weights and seed the two produce the same numbers in training too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.nn.context import AttentionContext, TransformerDims, gather_tokens, scatter_tokens
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.registry import PartSpec
from recbole_ext.nn.slots import ATTENTION

ACTIVATIONS = {
    "gelu": F.gelu,  # exact erf form, as RecBole's hand-written gelu, in one fused kernel
    "relu": F.relu,
    "swish": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
}


class FeedForward(nn.Module):
    """Point-wise W2 act(W1 h) (RecBole's ``FeedForward`` without its norm and residual)."""

    def __init__(self, dims: TransformerDims):
        super().__init__()
        self.dense_1 = nn.Linear(dims.hidden_size, dims.inner_size)
        self.dense_2 = nn.Linear(dims.inner_size, dims.hidden_size)
        self.activation = ACTIVATIONS[dims.hidden_act]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_2(self.activation(self.dense_1(hidden)))


class TransformerBlock(nn.Module):
    def __init__(self, dims: TransformerDims, attention: nn.Module):
        super().__init__()
        self.attention = attention
        self.attention_dropout = Dropout(dims.hidden_dropout_prob, dims.dropout_impl)
        self.attention_norm = nn.LayerNorm(dims.hidden_size, eps=dims.layer_norm_eps)
        self.ffn = FeedForward(dims)
        self.ffn_dropout = Dropout(dims.hidden_dropout_prob, dims.dropout_impl)
        self.ffn_norm = nn.LayerNorm(dims.hidden_size, eps=dims.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        attended = self.attention(hidden, context)
        index = context.packed_rows
        if index is None:
            return self.token_wise(hidden, attended)
        # ``pack_tokens``: everything but the mixing of positions acts on each position alone, so it
        # runs on the real tokens [T, D] only (Beauty: ~18% of a batch's positions); padded positions
        # leave the block as zeros, which no real position reads (the parts declared it:
        # trimming-exact). Parts with Q/K/V projections pack those too and return [T, D]
        # (``QKVAttention``); a part's full [B, L, D] output is gathered here.
        if attended.dim() == hidden.dim():
            attended = gather_tokens(attended, index)
        return scatter_tokens(self.token_wise(gather_tokens(hidden, index), attended), index, hidden.shape[:2])

    def token_wise(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The block after its attention, position by position: residual, norm, feed-forward."""
        hidden = self.attention_norm(hidden + self.attention_dropout(attended))
        return self.ffn_norm(hidden + self.ffn_dropout(self.ffn(hidden)))


class TransformerEncoder(nn.Module):
    """``n_layers`` blocks; block i gets its own attention part built with ``layer_index=i``."""

    def __init__(self, dims: TransformerDims, attention: PartSpec):
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerBlock(dims, ATTENTION.build(attention, dims, index)) for index in range(dims.n_layers)
        )

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        for index, block in enumerate(self.blocks):
            context.layer_index = index
            hidden = block(hidden, context)
            context.record("layer_outputs", hidden)
        return hidden
