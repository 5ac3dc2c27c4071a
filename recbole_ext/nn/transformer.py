"""The transformer with slots: blocks whose attention is a part, sharing one position part.

Two block layouts (``block_layout``):

- ``post_ln`` (default), RecBole's, as in BERT: ``h = LN(x + Dropout(Attn(x)))``,
  ``out = LN(h + Dropout(W2 act(W1 h)))``. The order of dropout calls matches RecBole's, so with the
  same weights and seed the two produce the same numbers in training too.
- ``pre_ln``, as SASRec's own code and the papers built on it (TiSASRec, SSE-PT, Rec-Denoiser):
  ``h = x + Dropout(Attn(LN(x)))``, ``out = h + Dropout(W2 act(W1 LN(h)))``, and one LN after the
  last block. The residual stream is never normalised inside the blocks, so a block's Jacobian is
  the identity plus the sublayers' (Rec-Denoiser's Eq. 12 penalises it; docs/recdenoiser.md,
  "γ on windows"). SASRec's code normalises the queries only and adds the residual to them; here the
  attention reads one normalised input for queries, keys and values, the standard pre-LN block
  (Xiong et al. 2020), so every attention part fits the slot unchanged.

Two switches shrink the token-wise part of a block (everything after the attention) without
changing any output that is read: ``pack_tokens`` runs it on the real tokens only, and
``prune_unread_states`` runs the last block's at the positions the caller reads only
(``AttentionContext.read_rows``; SASRec's loss reads one position per sequence).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.nn.context import AttentionContext, RowSelection, TransformerDims, gather_tokens, scatter_tokens
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.registry import PartSpec
from recbole_ext.nn.slots import ATTENTION, PositionPart

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
        self.pre_ln = dims.block_layout == "pre_ln"

    def attention_input(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.attention_norm(hidden) if self.pre_ln else hidden

    def forward(self, hidden: torch.Tensor, context: AttentionContext, last: bool = False) -> torch.Tensor:
        """[B, L, D] → [B, L, D]; the last block of a pass with ``context.read_rows`` → [R, D]."""
        if last and context.read_rows is not None:
            return self.at_read_rows(hidden, context)
        attended = self.attention(self.attention_input(hidden), context)
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

    def at_read_rows(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """``prune_unread_states``: the last block at the read rows only, [R, D].

        Nothing reads the other positions' final states (SASRec's loss and scores read one position
        per sequence). The token-wise layers act on each position alone, so they run at the read
        rows; a part that ``attends_from_read_rows`` also computes only the read positions' queries
        (their keys and values are every position's). Where an auxiliary loss records something
        from inside the attention, or the position part biases the [L, L] logits, the attention
        runs whole. Every dropout mask is drawn for the rows the full block would run on and the
        read rows kept (``RowSelection``), so outputs and the random stream are the full block's."""
        reads, packed = context.read_rows, context.packed_rows
        if packed is None:
            rows = RowSelection(reads, hidden.shape[0] * hidden.shape[1])
        else:
            rows = RowSelection(context.read_rows_in_packed(), packed.numel())
        context.queries_at_read_rows = self.attention.attends_from_read_rows and not context.wants \
            and type(context.position).logit_bias is PositionPart.logit_bias
        try:
            attended = self.attention(self.attention_input(hidden), context)
            if not context.queries_at_read_rows:
                if attended.dim() == hidden.dim():
                    attended = gather_tokens(attended, reads)
                else:  # packed [T, D] (``QKVAttention``)
                    attended = attended.index_select(0, rows.index)
        finally:
            context.queries_at_read_rows = False
        return self.token_wise(gather_tokens(hidden, reads), attended, rows)

    def token_wise(self, hidden: torch.Tensor, attended: torch.Tensor, rows: RowSelection | None = None) -> torch.Tensor:
        """The block after its attention, position by position: residual, norm, feed-forward."""
        if self.pre_ln:
            hidden = hidden + self.attention_dropout(attended, rows)
            return hidden + self.ffn_dropout(self.ffn(self.ffn_norm(hidden)), rows)
        hidden = self.attention_norm(hidden + self.attention_dropout(attended, rows))
        return self.ffn_norm(hidden + self.ffn_dropout(self.ffn(hidden), rows))


class TransformerEncoder(nn.Module):
    """``n_layers`` blocks; block i gets its own attention part built with ``layer_index=i``."""

    def __init__(self, dims: TransformerDims, attention: PartSpec):
        super().__init__()
        self.blocks = nn.ModuleList(
            TransformerBlock(dims, ATTENTION.build(attention, dims, index)) for index in range(dims.n_layers)
        )
        # pre_ln: the residual stream leaves the last block unnormalised
        self.final_norm = nn.LayerNorm(dims.hidden_size, eps=dims.layer_norm_eps) \
            if dims.block_layout == "pre_ln" else None

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        for index, block in enumerate(self.blocks):
            context.layer_index = index
            hidden = block(hidden, context, last=index == len(self.blocks) - 1)
            context.record("layer_outputs", hidden)
        return hidden if self.final_norm is None else self.final_norm(hidden)
