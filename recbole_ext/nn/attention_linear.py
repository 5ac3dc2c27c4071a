"""Linear (kernelised) attention: LinRec (Liu et al., SIGIR 2023) and the two efficient-attention
baselines of its Table 3, the Linear Transformer (Katharopoulos et al. 2020) and Efficient Attention
(Shen et al. 2021).

All three compute, per head, ``out_t = φ(q_t) · Σ_{m ∈ S(t)} ψ(k_m) v_mᵀ`` (the Linear Transformer
divides by ``φ(q_t) · Σ_m ψ(k_m)``), forming ``Kᵀ V`` (a d×d matrix) before touching the queries, so
time and activation memory grow as N·d² instead of N²·d (LinRec §3.4.2). They differ only in the
feature maps φ, ψ; masking, the causal form and the record of the effective attention matrix are
shared here.

Masking (option ``mask``), see docs/linrec.md:
``none``    the authors' code: every query sees every key, padding included. Bidirectional even on
            SASRec, and a real position's output depends on the padded length N.
``padding`` padded keys removed (and excluded from LinRec-paper's / EA's per-column statistics).
``causal``  query t sees keys m ≤ t (padding trails, so never padding), at linear cost
            (:func:`causal_linear_attention`); per-column statistics run over the prefix only.
``auto``    ``causal`` on a causal backbone (SASRec, CORE, ...), ``padding`` on a bidirectional one.

Statistics taken per key *column* over positions (LinRec-paper's ρ2, EA's softmax over positions)
depend on the query position t once the attention is causal; they multiply ψ(k_m)_j by a factor
that depends on (t, j) only, so they are folded into φ(q_t)_j instead. The result is exact and keeps
the one ``Kᵀ V`` path for every mode.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from recbole_ext.nn.attention_softmax import QKVAttention
from recbole_ext.nn.context import MASKED_LOGIT, AttentionContext, TransformerDims
from recbole_ext.nn.slots import ATTENTION, PositionPart

Mask = Literal["none", "padding", "causal", "auto"]


def causal_linear_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """``out_t = Σ_{m ≤ t} (q_t · k_m) v_m`` for [B, H, N, d] inputs, in memory linear in N.

    Chunked form of the causal linear attention (Katharopoulos et al. 2020, Eq. 10): the exact masked
    quadratic form inside chunks of ``chunk_size`` positions, plus the running state ``Σ kᵀ v`` of all
    earlier chunks. Saved for backward per (batch, head): N·C chunk scores and (N/C)·d_k·d_v states.
    A per-position cumsum of states would hold N·d_k·d_v — more than softmax's N² at N=200, d_h=16.
    """
    batch, heads, length, _ = query.shape
    pad = -length % chunk_size
    if pad:
        query, key, value = (F.pad(x, (0, 0, 0, pad)) for x in (query, key, value))
    chunks = (length + pad) // chunk_size
    q, k, v = (x.reshape(batch, heads, chunks, chunk_size, x.size(-1)) for x in (query, key, value))
    within = torch.tril(q @ k.transpose(-1, -2)) @ v
    states = k.transpose(-1, -2) @ v  # [B, H, chunks, d_k, d_v]
    earlier = F.pad(states.cumsum(dim=2)[:, :, :-1], (0, 0, 0, 0, 1, 0))  # exclusive: chunks before this one
    out = within + q @ earlier
    return out.reshape(batch, heads, chunks * chunk_size, -1)[:, :, :length]


def column_total(x: torch.Tensor, valid: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Per-column sum over the keys query t sees: all (real) positions → [B, H, 1, d]; the prefix
    m ≤ t when causal → [B, H, N, d]. ``valid``: [B, 1, N, 1], 1 for real items, or None (keep padding)."""
    if valid is not None:
        x = x * valid
    return x.cumsum(dim=-2) if causal else x.sum(dim=-2, keepdim=True)


def _elu_l2(x: torch.Tensor, eps: float, scale: float) -> torch.Tensor:
    """y = scale · elu(x) / max(‖elu(x)‖₂, eps) over the last dimension, without autograd's records."""
    # Per-head Q/K are strided views of the fused projection: CPU elementwise kernels walk such a view
    # in runs of d_head, far slower than one pass over a contiguous copy (which is transient).
    return F.normalize(F.elu(x.contiguous()), dim=-1, eps=eps).mul_(scale)


class _EluL2Parts(NamedTuple):
    """elu(x), its norm ‖elu(x)‖₂, the clamped divisor and the normalised features, computed once
    in a backward and shared by the product's state and the derivative."""

    features: torch.Tensor
    norm: torch.Tensor
    divisor: torch.Tensor
    normalized: torch.Tensor

    @classmethod
    def of(cls, x: torch.Tensor, eps: float) -> "_EluL2Parts":
        features = F.elu(x.contiguous())  # contiguous: as in _elu_l2
        norm = features.norm(dim=-1, keepdim=True)
        divisor = norm.clamp_min(eps)
        return cls(features, norm, divisor, features / divisor)

    def backward(self, grad: torch.Tensor, eps: float, scale: float) -> torch.Tensor:
        """∂L/∂x of :func:`_elu_l2` (times ``scale``) for the upstream gradient ``grad``."""
        grad = grad * scale
        # d(e/max(‖e‖, eps))/de: (g − y (y·g)) / ‖e‖ above eps, g / eps below (a constant divisor).
        projection = (self.normalized * grad).sum(-1, keepdim=True) * (self.norm > eps)
        grad_features = (grad - self.normalized * projection) / self.divisor
        return grad_features * (self.features + 1.0).clamp_max(1.0)  # elu' = min(elu + 1, 1): 1 above 0, eˣ below


class _EluL2Normalize(torch.autograd.Function):
    """y = scale · elu(x) / max(‖elu(x)‖₂, eps) over the last dimension (LinRec's ρ(elu(·)), Eq. 6 and 8),
    saving only ``x`` for backward and recomputing the rest there. Autograd's composition would
    keep elu(x), the norms and the quotient alive per layer."""

    @staticmethod
    def forward(ctx, x, eps, scale):
        ctx.eps, ctx.scale = eps, scale
        ctx.save_for_backward(x)  # a view of the Q/K/V projection, which stays alive anyway
        return _elu_l2(x, eps, scale)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _EluL2Parts.of(x, ctx.eps).backward(grad, ctx.eps, ctx.scale), None, None


def elu_l2_normalize(x: torch.Tensor, eps: float, scale: float = 1.0) -> torch.Tensor:
    return _EluL2Normalize.apply(x, eps, scale)


class _EluL2LinearProduct(torch.autograd.Function):
    """LinRec's default non-causal attention in one step, Eq. (9) with the code's normalisation:
    ``out = φ(Q) (ψ(K)ᵀ V)`` with φ = ρ(elu(·))/√d_head on queries, ψ = ρ(elu(·)) on keys, keys
    outside ``valid`` zeroed. It saves only Q, K and V, which are views of the fused Q/K/V
    projection that autograd keeps anyway, and recomputes φ(Q), ψ(K) and ψ(K)ᵀV in backward (a few
    elementwise passes and a d×d product). Composed from autograd ops, the same attention would
    keep φ(Q), a copy of ψ(K)ᵀ and a contiguous copy of V per layer: at N = 200 those are the
    difference between LinRec's peak memory and ⅓ of softmax's (``benchmarks/linrec_scaling.py``).
    The backward is written in differentiable ops, so double backward (Jacobian penalties) works."""

    @staticmethod
    def forward(ctx, query, key, value, valid, eps, query_scale):
        ctx.eps, ctx.query_scale = eps, query_scale
        ctx.save_for_backward(query, key, value, valid)
        query_features, key_features = _EluL2LinearProduct.features(query, key, valid, eps, query_scale)
        return query_features @ (key_features.transpose(-1, -2) @ value)

    @staticmethod
    def features(query, key, valid, eps, query_scale):
        """φ(Q), ψ(K) with keys outside ``valid`` zeroed."""
        key_features = _elu_l2(key, eps, 1.0)
        return _elu_l2(query, eps, query_scale), key_features if valid is None else key_features.mul_(valid)

    @staticmethod
    def backward(ctx, grad):
        query, key, value, valid = ctx.saved_tensors
        eps, query_scale = ctx.eps, ctx.query_scale
        query_parts, key_parts = _EluL2Parts.of(query, eps), _EluL2Parts.of(key, eps)
        query_features = query_parts.normalized * query_scale
        key_features = key_parts.normalized if valid is None else key_parts.normalized * valid
        state = key_features.transpose(-1, -2) @ value                  # S = ψ(K)ᵀ V, [.., d_k, d_v]
        grad_state = query_features.transpose(-1, -2) @ grad            # ∂L/∂S = φ(Q)ᵀ G
        grad_query_features = grad @ state.transpose(-1, -2)            # ∂L/∂φ(Q) = G Sᵀ
        grad_key_features = value @ grad_state.transpose(-1, -2)        # ∂L/∂ψ(K) = V (∂L/∂S)ᵀ
        if valid is not None:
            grad_key_features = grad_key_features * valid
        return (query_parts.backward(grad_query_features, eps, query_scale),
                key_parts.backward(grad_key_features, eps, 1.0),
                key_features @ grad_state,                              # ∂L/∂V = ψ(K) ∂L/∂S
                None, None, None)


@dataclass(frozen=True)
class LinearAttentionOptions:
    # none: authors' code (bidirectional, padding included); padding; causal; auto (follow the backbone)
    mask: Mask = "none"
    # Causal chunk length C; null = d_head, which minimises the N·C + (N/C)·d_head² saved activations.
    chunk_size: int | None = None
    # Causal training: save only Q, K, V and recompute the chunked product in backward. At N = 200
    # LinRec's causal peak memory falls from 0.44 to 0.33 of softmax's, but its step takes 1.1-1.3x as
    # long (benchmarks/linrec_scaling.py; docs/linrec.md), so it is opt-in.
    recompute: bool = False

    def validate(self):
        if self.chunk_size is not None and self.chunk_size < 1:
            return f"chunk_size must be >= 1, got {self.chunk_size}"
        if getattr(self, "eps", 0.0) < 0:  # the subclasses' epsilon, where they have one
            return f"eps must be >= 0, got {self.eps}"
        return None


class KernelAttention(QKVAttention):
    """Shared frame of the linear attentions: subclasses define the feature maps φ(Q), ψ(K)."""

    Options = LinearAttentionOptions
    # Divide each output row by φ(q_t) · Σ_m ψ(k_m) (+ this epsilon); None = no row normalisation.
    row_normaliser_eps: float | None = None
    # With the default mask `none`, padded keys take part; the instance value follows the options.
    exact_under_trailing_trim = False

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        self.exact_under_trailing_trim = options.mask != "none"
        self.chunk_size = options.chunk_size or dims.head_size

    def feature_maps(self, query, key, valid, causal) -> tuple[torch.Tensor, torch.Tensor]:
        """φ(Q), ψ(K) per head ([B, H, N, d]); per-(t, column) key statistics go into φ(Q)."""
        raise NotImplementedError

    def lean_product(self, query, key, value, valid) -> torch.Tensor | None:
        """The non-causal output by a memory-lean fused path, where a subclass has one; else None."""
        return None

    def mask_mode(self, context: AttentionContext) -> tuple[bool, bool]:
        """(drop padded keys, causal) for this pass."""
        mode = self.options.mask
        if mode == "auto":
            mode = "causal" if context.causal else "padding"
        return mode != "none", mode == "causal"

    def mix(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        if type(context.position).logit_bias is not PositionPart.logit_bias:
            raise ValueError(f"{type(self).__name__}: linear attention never forms the N×N logits, so the logit "
                             f"bias of position part {type(context.position).__name__} cannot apply")
        drop_padding, causal = self.mask_mode(context)
        valid = context.key_padding[:, None, :, None].to(query.dtype) if drop_padding else None
        if "attention_probs" in context.wants:  # quadratic, and only when an auxiliary loss asks
            out, query, key = self.attend(query, key, value, valid, causal)
            context.record("attention_probs", self.attention_matrix(query, key, causal))
            return out
        if not causal:
            out = self.lean_product(query, key, value, valid)
            if out is not None:
                return out
        if causal and self.options.recompute and torch.is_grad_enabled():
            # Keep only Q, K, V (views of the fused projection) for backward and rerun the chunked
            # product there: its chunk scores, states and padded copies are most of LinRec's causal
            # activation memory at N = 200. No randomness inside, so no RNG state to keep.
            return checkpoint(lambda *inputs: self.attend(*inputs)[0], query, key, value, valid, causal,
                              use_reentrant=False, preserve_rng_state=False)
        return self.attend(query, key, value, valid, causal)[0]

    def attend(self, query, key, value, valid, causal) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The output and the feature maps φ(Q), ψ(K) it used (padded keys zeroed)."""
        query, key = self.feature_maps(query, key, valid, causal)
        if valid is not None:
            key = key * valid
        if self.row_normaliser_eps is not None:  # the normaliser is the same product with v = 1
            value = torch.cat([value, torch.ones_like(value[..., :1])], dim=-1)
        if causal:
            out = causal_linear_attention(query, key, value, self.chunk_size)
        else:
            out = query @ (key.transpose(-1, -2) @ value)
        if self.row_normaliser_eps is not None:
            out = out[..., :-1] / (out[..., -1:] + self.row_normaliser_eps)
        return out, query, key

    def attention_matrix(self, query_features, key_features, causal) -> torch.Tensor:
        """The effective [B, H, N, N] weights B' = φ(Q) ψ(K)ᵀ that the linear form never builds."""
        weights = query_features @ key_features.transpose(-1, -2)
        if causal:
            weights = torch.tril(weights)
        if self.row_normaliser_eps is not None:
            weights = weights / (weights.sum(-1, keepdim=True) + self.row_normaliser_eps)
        return weights


@ATTENTION.register("linrec")
class LinRecAttention(KernelAttention):
    """LinRec, Eq. (9): A' = ρ1(elu(Q)) · (ρ2(elu(K))ᵀ V); no parameters beyond the projections.

    ``norm: code`` (the authors' code, which produced the published numbers): Q and K both
    L2-normalised per token over d_head, one 1/√d_head after the products. ``norm: paper``
    (Eq. 6): Q rows normalised with 1/√d_head; K *columns* normalised over the N positions with
    1/√N — over real positions only when padding is masked, over the prefix m ≤ t when causal.
    Attention dropout is not applied (neither does the authors' code: there is no matrix to drop).
    """

    @dataclass(frozen=True)
    class Options(LinearAttentionOptions):
        norm: Literal["code", "paper"] = "code"
        l2: bool = True  # false: Fig. 4's "w/o L2" ablation (the scale constants stay)
        elu: bool = True  # false: Fig. 4's "w/o ELU" ablation
        # Norms are clamped to >= eps; 0 is the authors' bare division (NaN on an all-zero row).
        eps: float = 1.0e-12

    def lean_product(self, query, key, value, valid):
        options = self.options
        if options.elu and options.l2 and options.norm == "code":  # the default
            return _EluL2LinearProduct.apply(query, key, value, valid, options.eps, 1 / math.sqrt(self.dims.head_size))
        return None

    def feature_maps(self, query, key, valid, causal):
        options = self.options
        head_scale = math.sqrt(self.dims.head_size)
        if options.elu and options.l2 and options.norm == "code":  # the default, in the memory-lean form
            return elu_l2_normalize(query, options.eps, 1 / head_scale), elu_l2_normalize(key, options.eps)
        if options.elu:  # Eq. (8), applied before the normalisation
            query, key = F.elu(query), F.elu(key)
        if options.l2:  # ρ1 (Eq. 6): per query token over its d_head features
            query = F.normalize(query, dim=-1, eps=options.eps)
        if options.norm == "code":
            if options.l2:
                key = F.normalize(key, dim=-1, eps=options.eps)
            return query / head_scale, key
        # ρ2 (Eq. 6): key column j over the positions query t sees, times 1/√(their count).
        column_scale = column_total(torch.ones_like(key[..., :1]), valid, causal).sqrt()
        if options.l2:
            column_scale = column_scale * column_total(key.square(), valid, causal).sqrt().clamp_min(options.eps)
        return query / (head_scale * column_scale), key


@ATTENTION.register("linear_transformer")
class LinearTransformerAttention(KernelAttention):
    """Linear Transformer (Katharopoulos et al. 2020, Eq. 6-7): φ(x) = elu(x) + 1 on queries and
    keys, each output row divided by φ(q_t) · Σ_m φ(k_m). LinRec's Table 3 baseline "LT"."""

    @dataclass(frozen=True)
    class Options(LinearAttentionOptions):
        eps: float = 1.0e-6  # added to the row normaliser, as in the reference implementation

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        self.row_normaliser_eps = options.eps

    def feature_maps(self, query, key, valid, causal):
        return F.elu(query) + 1, F.elu(key) + 1


@ATTENTION.register("efficient_attention")
class EfficientAttention(KernelAttention):
    """Efficient Attention (Shen et al. 2021, Eq. 4 with softmax normalisers): softmax over each
    query's features times (softmax over positions of each key feature)ᵀ V. LinRec's baseline "EA"
    and its "double softmax" alternative (Eq. 14-15)."""

    def feature_maps(self, query, key, valid, causal):
        query = torch.softmax(query, dim=-1)
        if valid is not None:
            key = key.masked_fill(valid == 0, MASKED_LOGIT)
        if not causal:
            return query, torch.softmax(key, dim=-2)
        # Softmax over the prefix m ≤ t: exp(k_m) / Σ_{m'≤t} exp(k_m'), the denominator folded into φ(q_t).
        # The shift cancels in the ratio; the first key (not the column max, which reads the future)
        # keeps even the rounding independent of later items. It overflows only if a later key
        # exceeds the first by ~88 in one feature.
        key = torch.exp(key - key[..., :1, :].detach())
        return query / column_total(key, valid, causal), key
