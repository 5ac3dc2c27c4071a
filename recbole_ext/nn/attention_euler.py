"""EulerFormer's complex-vector attention (Tian et al., SIGIR 2024, §3.1-3.2).

Queries and keys are read as d/2 complex numbers (the Euler transformation, Eq. 2-4), their phases
adapted per layer and rotated by their position before the usual softmax attention (Eq. 7-13)::

    θ̃_Q = δ ⊙ θ_Q + b + j·g,     θ̃_K = δ ⊙ θ_K + j·g,     moduli unchanged, V not rotated,

so a logit is Σ λ^Q_m λ^K_n cos(δ(θ^Q_m − θ^K_n) + b + (m − n)·g) (Eq. 13): with δ = 1, b = 0 it is
RoPE. Defaults follow the authors' code (specs/eulerformer.md §1.4, §6): dims (2t, 2t+1) form pair t
over the whole hidden vector (so head h holds pairs h·d_h/2 ...), δ and b are scalars per layer
(δ starts at ``init_factor``, b at 0), g_t = base^(−2t/d) over the full hidden size, positions from 0.
The paper's variants are options: vector δ/b (``delta_shape``/``bias_shape: vector``), per-head
half-split pairs (``pairing: half``), per-head frequency spectrum (``frequencies: head``).

Table 5's ablations (docs/eulerformer.md): ``adaptation: false`` (1, δ ≡ 1, b ≡ 0);
``adaptation: false, learnable_frequencies: true`` (2); ``differential_rotation: false`` (3, no j·g);
(4) and (5) are the position part and the aux loss (``position: learned_absolute``, no
``phase_contrastive``).

The rotated phases are recorded as ``euler_query_phases``/``euler_key_phases`` ([B, L, d/2] per
layer, wrapped to [−π, π) like the code's ``atan2``) when an auxiliary loss (phase contrastive
learning) asks for them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recbole_ext.nn.attention_softmax import SoftmaxAttention, merge_heads
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.slots import ATTENTION

Pairing = Literal["interleaved", "half"]
FrequencySpan = Literal["hidden", "head"]
QUERY_PHASES, KEY_PHASES = "euler_query_phases", "euler_key_phases"


def split_pairs(x: torch.Tensor, pairing: Pairing) -> tuple[torch.Tensor, torch.Tensor]:
    """The real and imaginary parts of the last dimension's complex pairs: (2t, 2t+1) for
    ``interleaved`` (the authors' code, GPT-J RoPE), (t, t + n/2) for ``half`` (the paper's Eq. 3)."""
    # One copy into two contiguous halves: elementwise kernels (atan2 above all, ~14x) are far
    # slower on strided views, and per-head queries are strided anyway.
    if pairing == "interleaved":
        parts = x.unflatten(-1, (-1, 2)).movedim(-1, 0).contiguous()
    else:
        parts = x.unflatten(-1, (2, -1)).movedim(-2, 0).contiguous()
    return parts[0], parts[1]


def merge_pairs(real: torch.Tensor, imaginary: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """Inverse of :func:`split_pairs`."""
    if pairing == "interleaved":
        return torch.stack((real, imaginary), dim=-1).flatten(-2)
    return torch.cat((real, imaginary), dim=-1)


class _PairTurn(torch.autograd.Function):
    """(r + is)·e^{iφ} with a backward that reuses the forward's cos φ, sin φ and outputs
    (autograd's would recompute both and more): ∂/∂φ = r'·g_s − s'·g_r."""

    @staticmethod
    def forward(ctx, real, imaginary, angle):
        cos, sin = angle.cos().to(real.dtype), angle.sin().to(real.dtype)
        turned_real, turned_imaginary = real * cos - imaginary * sin, real * sin + imaginary * cos
        ctx.angle_shape, ctx.angle_dtype = angle.shape, angle.dtype
        ctx.save_for_backward(cos, sin, turned_real, turned_imaginary)
        return turned_real, turned_imaginary

    @staticmethod
    def backward(ctx, grad_real, grad_imaginary):
        cos, sin, turned_real, turned_imaginary = ctx.saved_tensors
        grads = [None, None, None]
        if ctx.needs_input_grad[0]:
            grads[0] = grad_real * cos + grad_imaginary * sin
        if ctx.needs_input_grad[1]:
            grads[1] = grad_imaginary * cos - grad_real * sin
        if ctx.needs_input_grad[2]:
            grad_angle = grad_imaginary * turned_real - grad_real * turned_imaginary
            grads[2] = grad_angle.sum_to_size(ctx.angle_shape).to(ctx.angle_dtype)
        return tuple(grads)


def rotate_pairs(x: torch.Tensor, angle: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """Multiply every complex pair by e^{i·angle} (``angle`` broadcasts to the pairs' shape)."""
    real, imaginary = split_pairs(x, pairing)
    return merge_pairs(*_PairTurn.apply(real, imaginary, angle), pairing)


def _degenerate(real: torch.Tensor, imaginary: torch.Tensor) -> torch.Tensor:
    """Pairs at (0, 0), or so close that r² + s² underflows: there atan2' and √' are 0/0."""
    with torch.no_grad():
        return real * real + imaginary * imaginary <= torch.finfo(real.dtype).tiny


def pair_phases(x: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """θ = atan2(s, r) of each pair (Eq. 3), [..., n/2]. A degenerate pair is read as (1, s): its
    phase is ≈ 0 with a finite gradient, and every other pair is computed without any epsilon."""
    real, imaginary = split_pairs(x, pairing)
    return torch.atan2(imaginary, real + _degenerate(real, imaginary))


def euler_transform(x: torch.Tensor, pairing: Pairing) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3: x ∈ R^n → modulus λ = √(r² + s²) and phase θ = atan2(s, r), each [..., n/2]; at a
    degenerate pair λ = 0 and θ ≈ 0, with finite gradients."""
    real, imaginary = split_pairs(x, pairing)
    degenerate = _degenerate(real, imaginary)
    modulus = torch.where(degenerate, 0.0, torch.sqrt(real * real + imaginary * imaginary + degenerate))
    return modulus, torch.atan2(imaginary, real + degenerate)


def inverse_euler_transform(modulus: torch.Tensor, phase: torch.Tensor, pairing: Pairing) -> torch.Tensor:
    """Eq. 6: λ e^{iθ} → [λ cos θ ; λ sin θ] in the layout of ``pairing``."""
    return merge_pairs(modulus * torch.cos(phase), modulus * torch.sin(phase), pairing)


def wrap_phase(phase: torch.Tensor) -> torch.Tensor:
    """Into [−π, π): the range of the ``atan2`` the authors' code takes of the rotated vectors."""
    return torch.remainder(phase + math.pi, 2 * math.pi) - math.pi


def rotary_frequencies(hidden_size: int, n_heads: int, span: FrequencySpan, base: float = 10000.0) -> torch.Tensor:
    """[H, d_head/2] angular frequency of each head's pairs (Eq. 9, g_t = base^(−2t/n)).

    ``hidden``: one spectrum over the whole hidden size, t = 0..d/2−1 (the authors' code): head h
    gets g_{h·d_h/2} .. g_{(h+1)·d_h/2−1}. ``head``: every head gets the full spectrum of d_head
    (standard per-head RoPE)."""
    head_pairs = hidden_size // n_heads // 2
    if span == "hidden":
        exponent = torch.arange(hidden_size // 2, dtype=torch.float64) * 2 / hidden_size
        return (base ** -exponent).float().view(n_heads, head_pairs)
    exponent = torch.arange(head_pairs, dtype=torch.float64) * 2 / (2 * head_pairs)
    return (base ** -exponent).float().expand(n_heads, head_pairs).contiguous()


def position_angles(frequencies: torch.Tensor, length: int) -> torch.Tensor:
    """[H, L, d_head/2]: α_j = j·g for positions j = 0..L−1 (RecBole's left-aligned index)."""
    positions = torch.arange(length, dtype=frequencies.dtype, device=frequencies.device)
    return positions[None, :, None] * frequencies[:, None, :]


@ATTENTION.register("euler")
class EulerAttention(SoftmaxAttention):
    """Softmax attention on Euler-rotated queries and keys (Eq. 7-13); mixing, masks, dropout and
    any position logit bias are :class:`SoftmaxAttention`'s."""

    @dataclass(frozen=True)
    class Options(SoftmaxAttention.Options):
        init_factor: float = 1.0          # initial δ (the code's ``init_factor``; 1 starts as RoPE)
        euler_bias: bool = True           # learnable query-phase bias b (the code's ``euler_bias``); else b ≡ 0
        delta_shape: Literal["scalar", "vector"] = "scalar"   # code: one δ per layer; paper: δ ∈ R^{d/2}
        bias_shape: Literal["scalar", "vector"] = "scalar"    # code: one b per layer; paper: b ∈ R^{d/2}
        pairing: Pairing = "interleaved"  # interleaved over the hidden vector (code) | half: per-head half split
        frequencies: FrequencySpan = "hidden"  # g over the full hidden size (code) | head: per-head spectrum
        base: float = 10000.0             # angle base of g (Eq. 9)
        adaptation: bool = True           # Table 5 (1) when false: δ ≡ 1, b ≡ 0, no parameters
        learnable_frequencies: bool = False    # Table 5 (2) (with adaptation: false): g trained, init base^(−2t/d)
        differential_rotation: bool = True     # Table 5 (3) when false: no positional rotation j·g

        def validate(self):
            problem = SoftmaxAttention.Options.validate(self)
            if problem:
                return problem
            if self.base <= 1:
                return f"base must be > 1, got {self.base}"
            if self.learnable_frequencies and not self.differential_rotation:
                return "learnable_frequencies needs differential_rotation: true (there are no frequencies to learn)"

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        if dims.head_size % 2:
            raise ValueError(f"attention 'euler' pairs dimensions: head size {dims.head_size} must be even")
        pairs = dims.hidden_size // 2
        if options.adaptation:
            self.delta = nn.Parameter(torch.full((1 if options.delta_shape == "scalar" else pairs,), options.init_factor))
            if options.euler_bias:
                self.phase_bias = nn.Parameter(torch.zeros(1 if options.bias_shape == "scalar" else pairs))
        frequencies = rotary_frequencies(dims.hidden_size, dims.n_heads, options.frequencies, options.base)
        if options.learnable_frequencies:
            self.frequencies = nn.Parameter(frequencies)
        elif options.differential_rotation:
            # fixed, never trained, rebuilt on load (the code keeps α in a Parameter it only reads via .data)
            self.register_buffer("frequencies", frequencies, persistent=False)

    def reset_part_parameters(self) -> None:
        """δ = init_factor, b = 0, g = its table, also after a backbone's blanket re-init (CORE's uniform
        one; the authors' CORE re-draws b, w and even the fixed α there: specs/eulerformer.md §6.6)."""
        with torch.no_grad():
            if self.options.adaptation:
                self.delta.fill_(self.options.init_factor)
                if self.options.euler_bias:
                    self.phase_bias.zero_()
            if self.options.learnable_frequencies:
                self.frequencies.copy_(rotary_frequencies(self.dims.hidden_size, self.dims.n_heads,
                                                          self.options.frequencies, self.options.base))

    def _per_head(self, parameter: torch.Tensor) -> torch.Tensor:
        """A scalar or a [d/2] vector, broadcastable to [B, H, L, d_head/2] (pair t of the hidden vector
        is pair t mod d_head/2 of head t div d_head/2)."""
        return parameter if parameter.numel() == 1 else parameter.view(self.dims.n_heads, 1, -1)

    def rotate(self, x: torch.Tensor, angles: torch.Tensor | None, is_query: bool,
               context: AttentionContext) -> torch.Tensor:
        """Eq. 7-8, 11-12 on per-head [B, H, L, d_head] queries or keys, as a turn of every pair:
        λ e^{i(δθ + b + α)} = (r + is)·e^{i((δ − 1)θ + b + α)}. No modulus is needed, and without
        adaptation (δ ≡ 1, b ≡ 0) no phase either: then it is RoPE's rotation by α."""
        name = QUERY_PHASES if is_query else KEY_PHASES
        wanted = name in context.wants
        dtype = x.dtype
        if x.element_size() < 4:  # phases in fp32 also under bf16/fp16 autocast (δθ amplifies rounding)
            x = x.float()
        phase = pair_phases(x, self.options.pairing) if self.options.adaptation or wanted else None
        turn = angles
        if self.options.adaptation:
            adapted = (self._per_head(self.delta) - 1.0) * phase
            if is_query and self.options.euler_bias:
                adapted = adapted + self._per_head(self.phase_bias)  # Eq. 11: the bias is on the query only
            turn = adapted if turn is None else adapted + turn
        if wanted:
            context.record(name, merge_heads(wrap_phase(phase if turn is None else phase + turn)))
        return x.to(dtype) if turn is None else rotate_pairs(x, turn, self.options.pairing).to(dtype)

    def project(self, hidden: torch.Tensor, context: AttentionContext):
        query, key, value = super().project(hidden, context)
        angles = None
        if self.options.differential_rotation:
            angles = position_angles(self.frequencies, query.size(2))
        return self.rotate(query, angles, True, context), self.rotate(key, angles, False, context), value
