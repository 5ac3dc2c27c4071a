"""The attention and position slots: their registries and the interface a part implements."""
from __future__ import annotations

import torch
from torch import nn

from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.registry import Registry

ATTENTION: Registry["AttentionPart"] = Registry("attention")
POSITION: Registry["PositionPart"] = Registry("position")


class AttentionPart(nn.Module):
    """Mixes positions of one layer: [B, L, D] → [B, L, D], output projection included.

    The block around it adds dropout, the residual and layer norm (RecBole's post-LN layout).
    Constructed as ``Part(options, dims, layer_index)``. When ``context.packed_rows`` is set
    (``pack_tokens``), a part may return its output at those tokens only, [T, D]; the block
    gathers a full [B, L, D] output itself.
    """

    # Whether outputs at real positions are unchanged when trailing padding is cut off
    # (true for masked attention on left-aligned sequences; false e.g. for a fixed-length FFT).
    exact_under_trailing_trim = True
    # Whether the part honours ``context.queries_at_read_rows`` (the last block of a pass that reads
    # a few positions): it then returns the read positions' outputs only, [R, D].
    attends_from_read_rows = False

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__()
        self.options = options
        self.dims = dims
        self.layer_index = layer_index

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        raise NotImplementedError


class PositionPart(nn.Module):
    """How order enters the model. Override any of the three hooks; the defaults do nothing.

    Constructed as ``Part(options, dims)``; one instance is shared by all layers.
    """

    exact_under_trailing_trim = True
    # Whether ``rotate_query_key`` changes Q and K. Attention parts that transform Q/K/V along time
    # before the heads are split (FEARec's band filter) need the rotation first, so they ask.
    rotates_query_key = False

    def __init__(self, options, dims: TransformerDims):
        super().__init__()
        self.options = options
        self.dims = dims

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """Input-level encodings: [B, L, D] item embeddings → [B, L, D]."""
        return item_embedding

    def rotate_query_key(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext):
        """Encodings applied to per-head queries and keys, each [B, H, L, d_head]."""
        return query, key

    def logit_bias(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor | None:
        """An additive bias for the attention logits, broadcastable to [B, H, L, L], or None."""
        return None
