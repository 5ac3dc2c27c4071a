"""Relative position encodings: EulerFormer's Table 4 baselines (specs/eulerformer.md §1.12).

- ``rope``: rotary embedding (Su et al. 2021), GPT-J layout: pair (2t, 2t+1) of each head's query
  and key turned by j·g_t. By default g spans the whole hidden size as in EulerFormer's code, so this
  is exactly EulerFormer with δ = 1, b = 0 (the paper's "special case", tested).
- ``rope_half``: the same rotation with each head split in halves (t, t + d_head/2) and the full
  spectrum per head (GPT-NeoX/LLaMA layout).
- ``alibi``: −m_h·|i − j| added to head h's logits, slopes m_h = 2^(−8h/H) (Press et al. 2022).
- ``t5_bias``: a learned scalar per head and log-bucketed distance (Raffel et al. 2020, §2.1).
- ``xlnet_relative``: Transformer-XL/XLNet relative attention (Dai et al. 2019, Eq. (b)-(d)):
  (q_i + v)·W_R^l R_{i−j} + u·k_j, R a sinusoid of the signed distance.

The paper configures none of them. Choices (docs/eulerformer.md): by default they replace SASRec's
learned absolute embedding (``absolute: true`` keeps it); ALiBi and T5 use |i − j| / signed buckets
when attention is bidirectional; T5 uses 32 buckets up to distance 128; XLNet's u, v are shared by
all layers, W_R is per layer; logit biases are added after the 1/√d_head scaling (XLNet's terms are
scaled with it, as in the original).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from recbole_ext.nn.attention_euler import FrequencySpan, Pairing, position_angles, rotary_frequencies, rotate_pairs
from recbole_ext.nn.attention_softmax import split_heads
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.position_basic import LearnedAbsolutePosition
from recbole_ext.nn.slots import POSITION, PositionPart


class RelativePosition(PositionPart):
    """A position part acting inside attention, optionally on top of the learned absolute embedding."""

    @dataclass(frozen=True)
    class Options:
        absolute: bool = False  # also add SASRec's learned absolute position embedding at the input

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.absolute = LearnedAbsolutePosition(None, dims) if options.absolute else None

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        return item_embedding if self.absolute is None else self.absolute.embed_input(item_embedding, context)


def distances(length: int, device: torch.device) -> torch.Tensor:
    """[L, L] signed i − j (query position minus key position)."""
    index = torch.arange(length, device=device)
    return index[:, None] - index[None, :]


@POSITION.register("rope")
class RotaryPosition(RelativePosition):
    """q_m ← q_m e^{i m g}, k_n ← k_n e^{i n g} per complex pair, so q·k depends on m − n only."""

    pairing: Pairing = "interleaved"
    rotates_query_key = True

    @dataclass(frozen=True)
    class Options(RelativePosition.Options):
        frequencies: FrequencySpan = "hidden"  # g_t = base^(−2t/d) over the hidden size | head: per-head spectrum
        base: float = 10000.0

        def validate(self):
            if self.base <= 1:
                return f"base must be > 1, got {self.base}"

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        if dims.head_size % 2:
            raise ValueError(f"rotary position encodings pair dimensions: head size {dims.head_size} must be even")
        frequencies = rotary_frequencies(dims.hidden_size, dims.n_heads, options.frequencies, options.base)
        self.register_buffer("frequencies", frequencies, persistent=False)

    def rotate_query_key(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext):
        angles = position_angles(self.frequencies, query.size(2))  # [H, L, d_head/2]
        return rotate_pairs(query, angles, self.pairing), rotate_pairs(key, angles, self.pairing)


@POSITION.register("rope_half")
class HalfSplitRotaryPosition(RotaryPosition):
    """RoPE on pairs (t, t + d_head/2) of each head, each head with the full spectrum base^(−2t/d_head)."""

    pairing: Pairing = "half"

    @dataclass(frozen=True)
    class Options(RotaryPosition.Options):
        frequencies: FrequencySpan = "head"


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2022, §3: the geometric sequence 2^(−8/H), 2^(−16/H), ...; for H not a power of
    two, the sequence of the next lower power of two, then every other slope of the one above."""
    def geometric(count: int) -> list[float]:
        ratio = 2.0 ** (-8.0 / count)
        return [ratio ** (h + 1) for h in range(count)]

    lower = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(lower) + geometric(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes)


@POSITION.register("alibi")
class ALiBiPosition(RelativePosition):
    """Logit bias −m_h·|i − j|: a fixed linear penalty on distance, a different slope per head."""

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.register_buffer("slopes", alibi_slopes(dims.n_heads), persistent=False)

    def logit_bias(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        distance = distances(query.size(2), query.device).abs().to(query.dtype)
        return -(self.slopes.to(query.dtype)[:, None, None] * distance)[None]


def t5_buckets(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket of each signed distance i − j: exact up to half the buckets, then logarithmic up to
    ``max_distance`` (Raffel et al. 2020); bidirectionally, half the buckets are for keys after the query."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative < 0).long() * num_buckets
        relative = relative.abs()
    else:
        relative = relative.clamp(min=0)
    exact = num_buckets // 2
    scaled = torch.log(relative.float().clamp(min=1) / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    large = (exact + scaled.long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(relative < exact, relative, large)


@POSITION.register("t5_bias")
class T5RelativeBias(RelativePosition):
    """A learned scalar per head and distance bucket, added to the logits; shared by all layers."""

    @dataclass(frozen=True)
    class Options(RelativePosition.Options):
        num_buckets: int = 32
        max_distance: int = 128

        def validate(self):
            if self.num_buckets < 4:
                return f"num_buckets must be >= 4, got {self.num_buckets}"
            if self.max_distance <= self.num_buckets // 2:
                return f"max_distance must exceed num_buckets/2 ({self.num_buckets // 2}), got {self.max_distance}"

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.bias_table = nn.Embedding(options.num_buckets, dims.n_heads)

    def logit_bias(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        buckets = t5_buckets(distances(query.size(2), query.device), not context.causal,
                             self.options.num_buckets, self.options.max_distance)
        return self.bias_table(buckets).permute(2, 0, 1)[None].to(query.dtype)  # [1, H, L, L]


def signed_sinusoids(relative: torch.Tensor, size: int) -> torch.Tensor:
    """[..., size]: [sin(Δ f) ; cos(Δ f)] with f_t = 10000^(−2t/size) (Transformer-XL's R)."""
    frequencies = torch.exp(torch.arange(0, size, 2, dtype=torch.float32, device=relative.device)
                            * (-math.log(10000.0) / size))
    angles = relative.float()[..., None] * frequencies
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


@POSITION.register("xlnet_relative")
class XLNetRelativePosition(RelativePosition):
    """Transformer-XL's terms (b) q_i·W_R R_{i−j}, (c) u·k_j and (d) v·W_R R_{i−j}; (a) q_i·k_j is the
    attention's own. O(N²·d) per layer through a [B, H, L, 2L−1] product and a gather."""

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        self.relative_projections = nn.ModuleList(
            nn.Linear(dims.hidden_size, dims.hidden_size, bias=False) for _ in range(dims.n_layers))
        self.content_bias = nn.Parameter(torch.zeros(dims.n_heads, dims.head_size))   # u
        self.position_bias = nn.Parameter(torch.zeros(dims.n_heads, dims.head_size))  # v

    def reset_part_parameters(self) -> None:
        with torch.no_grad():
            self.content_bias.zero_()
            self.position_bias.zero_()

    def logit_bias(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        length = query.size(2)
        span = torch.arange(length - 1, -length, -1, device=query.device)  # i − j from L−1 down to −(L−1)
        projection = self.relative_projections[context.layer_index % len(self.relative_projections)]
        relative = split_heads(projection(signed_sinusoids(span, self.dims.hidden_size).to(query.dtype))[None],
                               self.dims.n_heads)[0]  # [H, 2L−1, d_head]
        by_distance = torch.matmul(query + self.position_bias[:, None, :], relative.transpose(-1, -2))
        # column (L−1) − (i − j) of row i holds distance i − j
        index = (length - 1) - distances(length, query.device)
        position_terms = by_distance.gather(-1, index.expand(*by_distance.shape[:2], -1, -1))
        content_terms = (key * self.content_bias[:, None, :]).sum(-1)[:, :, None, :]
        return (position_terms + content_terms) / math.sqrt(self.dims.head_size)
