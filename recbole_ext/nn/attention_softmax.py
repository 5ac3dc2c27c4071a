"""Scaled dot-product multi-head attention (Vaswani et al. 2017, Eq. 1), RecBole's layout.

The reference every paper's attention departs from. Parameter names (``query``, ``key``, ``value``,
``dense``) follow RecBole's ``MultiHeadAttention`` so its checkpoints map one to one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.nn.context import AttentionContext, TransformerDims, gather_tokens, on_packed_rows
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.slots import ATTENTION, AttentionPart


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, L, H*d] → [B, H, L, d]."""
    batch, length, _ = x.shape
    return x.view(batch, length, n_heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, L, d] → [B, L, H*d]."""
    batch, heads, length, size = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * size)


class QKVAttention(AttentionPart):
    """Shared frame of attention parts with query/key/value/output projections (RecBole names)."""

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        if dims.hidden_size % dims.n_heads:
            raise ValueError(f"hidden_size ({dims.hidden_size}) is not a multiple of n_heads ({dims.n_heads})")
        self.query = nn.Linear(dims.hidden_size, dims.hidden_size)
        self.key = nn.Linear(dims.hidden_size, dims.hidden_size)
        self.value = nn.Linear(dims.hidden_size, dims.hidden_size)
        self.dense = nn.Linear(dims.hidden_size, dims.hidden_size)

    def project(self, hidden: torch.Tensor, context: AttentionContext):
        """Per-head Q, K, V ([B, H, L, d]) with the position part's rotation applied to Q and K.

        One GEMM against the three weights stacked (the layers stay separate, under RecBole's
        names): on CPU a [B·L, D]×[D, 3D] product, forward and backward, is ~25% cheaper than
        three [B·L, D]×[D, D] ones (``benchmarks/train_step.py``)."""
        query, key, value = self.unstack_heads(self.project_stacked(hidden, context.packed_rows))
        query, key = context.position.rotate_query_key(query, key, context)
        return query, key, value

    def project_stacked(self, hidden: torch.Tensor, packed_rows: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L, D] → [B, L, 3·D]: Q | K | V side by side, each with heads in order, not rotated.

        With ``packed_rows`` (``pack_tokens``) only those rows are projected and the padded ones are
        zero: a trimming-exact part never reads them, and the GEMM shrinks to the real tokens."""
        weight = torch.cat((self.query.weight, self.key.weight, self.value.weight))
        bias = torch.cat((self.query.bias, self.key.bias, self.value.bias))
        return on_packed_rows(lambda rows: F.linear(rows, weight, bias), hidden, packed_rows)

    def unstack_heads(self, stacked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, L, 3·D] → Q, K, V as [B, H, L, d] views (no copy)."""
        batch, length, _ = stacked.shape
        return stacked.view(batch, length, 3, self.dims.n_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)

    def mix(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """[B, L, D] → [B, L, D], or [T, D] at ``context.packed_rows`` when set (``pack_tokens``:
        the output projection then runs on the real tokens only), or [R, D] at the read rows when
        ``context.queries_at_read_rows`` (parts that ``attends_from_read_rows``)."""
        query, key, value = self.project(hidden, context)
        if context.queries_at_read_rows:
            mixed = self.mix(context.at_read_positions(query), key, value, context)  # [B, H, M, d]
            return self.dense(merge_heads(mixed).flatten(0, 1))
        return self.dense(gather_tokens(merge_heads(self.mix(query, key, value, context)), context.packed_rows))


@ATTENTION.register("softmax")
class SoftmaxAttention(QKVAttention):
    """softmax(Q Kᵀ / √d_head + bias + mask) V, with dropout on the attention probabilities."""

    @dataclass(frozen=True)
    class Options:
        # Logit scale; null = 1/√d_head (the paper's). Divides by √d_head exactly like RecBole.
        scale: float | None = None

        def validate(self):
            if self.scale is not None and self.scale <= 0:
                return f"scale must be > 0, got {self.scale}"

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        self.inverse_scale = math.sqrt(dims.head_size) if options.scale is None else 1.0 / options.scale
        self.attn_dropout = Dropout(dims.attn_dropout_prob, dims.dropout_impl)

    # Applies ``context.probability_gate`` (parts that wrap attention check this before relying on it).
    applies_probability_gate = True
    # Queries enter only through QKᵀ, so the read positions' outputs need only their queries: the
    # last block's scores, softmax, dropout and PV shrink from L rows per sequence to M. Subclasses
    # that mix differently (a time-interval bias, FEARec's FFT) set it false.
    attends_from_read_rows = True

    def probabilities(self, scores: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """softmax over the allowed keys, times the context's probability gate (if any); recorded."""
        # The mask in the scores' dtype: under bf16 autocast an fp32 mask would promote the whole
        # [B, H, L, L] softmax and its dropout to fp32, only for PV's matmul to round them back.
        probs = torch.softmax(scores + context.additive_mask_as(scores.dtype), dim=-1)
        if context.probability_gate is not None:
            probs = probs * context.probability_gate
        context.record("attention_probs", probs)
        return probs

    def mix(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        scores = torch.matmul(query, key.transpose(-1, -2)) / self.inverse_scale
        bias = context.position.logit_bias(query, key, context)
        if bias is not None:
            scores = scores + bias
        return torch.matmul(self.dropped_probabilities(self.probabilities(scores, context), context), value)

    def dropped_probabilities(self, probs: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """Dropout on the probabilities; for the read positions' rows, the full [B, H, L, L] mask's rows."""
        if not context.queries_at_read_rows:
            return self.attn_dropout(probs)
        return self.attn_dropout(probs.flatten(0, 2), context.read_probability_rows(probs.size(1))).view_as(probs)
