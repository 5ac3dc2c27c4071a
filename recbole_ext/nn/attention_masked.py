"""Rec-Denoiser's trainable binary attention masks and TiSASRec's time-interval attention.

``denoiser`` (Chen et al., RecSys 2022, §4.1) wraps a softmax-family attention part (``base``,
default ``softmax``) and multiplies its probabilities by a learned binary mask, Eq. (5):
``M⁽ˡ⁾ = softmax(Q Kᵀ/√d) ⊙ Z⁽ˡ⁾`` (no renormalisation). ``Z⁽ˡ⁾`` is indexed by (query position,
key position) and shared by all sequences: one logit matrix ``Φ⁽ˡ⁾`` (n × n, or H × n × n with
``per_head``) per layer, keep probability ``Π = σ(Φ)`` (Eq. 9).

- Training: ``Z = 𝟙[U < σ(Φ)]`` with ``U ~ Uniform(0,1)`` (Algorithm 1), one ``U`` per layer and
  batch (``sample_scope: batch``, the paper's literal reading) or per sequence (``sequence``). ``Z``
  comes from a comparison, so the forward pass carries **no gradient to Φ**: Φ learns only through
  the ARM/AR surrogate (``mask_gradient`` in ``losses_denoiser.py``, Eqs. 10-11) and the L0 penalty
  (``mask_l0``). The surrogate replays the step's ``U`` through :func:`replaying_masks`.
- Inference (deterministic): ``clip_soft`` (paper: "clip g(Φ) ≤ 0.5 to zeros", kept gates keep
  σ(Φ), the training-time expectation), ``hard`` (𝟙[σ(Φ) > t]) or ``soft`` (σ(Φ), no clip).
- Alignment: RecBole right-pads, SASRec/TiSASRec (the paper's code base) left-pad, so the most
  recent item sits at position n−1. ``align: right`` (default) indexes Φ in left-padded
  coordinates, which keeps the paper's position-pair meaning for every sequence length;
  ``native`` indexes it by RecBole's positions.

``U`` comes from a generator of the part's own, seeded from ``torch.initial_seed()``: the mask
draws leave torch's global random stream (dropout, samplers) exactly as in the plain backbone.

``time_interval`` is TiSASRec's attention (Li et al., WSDM 2020, Eq. 7-8):
``e_ij = q_i (k_j + r^K_ij + p^K_j)ᵀ / √d``, ``z_i = Σ_j α_ij (v_j + r^V_ij + p^V_j)``, with learned
embeddings of the clipped personalised time interval ``r_ij`` (from the ``tisasrec`` backbone,
``context.inputs["time_intervals"]``) and absolute-position embeddings for keys and values.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal

import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn.attention_softmax import SoftmaxAttention, split_heads
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.registry import parse_part_spec
from recbole_ext.nn.slots import ATTENTION, AttentionPart

MaskInference = Literal["clip_soft", "hard", "soft"]


def inference_mask(logits: torch.Tensor, rule: MaskInference, threshold: float) -> torch.Tensor:
    """Deterministic mask from logits Φ (§4.1, "Inference"): entries with σ(Φ) ≤ threshold are 0."""
    keep_probability = torch.sigmoid(logits)
    if rule == "soft":
        return keep_probability
    kept = keep_probability > threshold
    return kept.to(logits.dtype) if rule == "hard" else keep_probability * kept


def used_gates(logits: torch.Tensor, causal: bool) -> torch.Tensor:
    """Φ's entries some query can use, [heads, used]: v ≤ u when causal (for ``align: right`` the
    lower triangle is exactly those), all otherwise. The others get only the L0 push (spec §1.7)."""
    n = logits.size(-1)
    used = torch.ones(n, n, dtype=torch.bool, device=logits.device)
    return logits[:, used.tril() if causal else used]


def pruned_fraction(logits: torch.Tensor, threshold: float, causal: bool) -> float:
    """Share of used gates that inference zeroes (σ(Φ) ≤ threshold); logits [heads, n, n]."""
    return float((torch.sigmoid(used_gates(logits, causal)) <= threshold).float().mean())


def mask_statistics(logits: torch.Tensor, threshold: float, causal: bool) -> dict[str, float]:
    """What a trained mask looks like, over its used gates (spec §5, C2): the pruned share, the mean
    keep probability σ(Φ), and the spread of Φ, which tells a mask that learned a position pattern
    (Φ spread out) from one that only drifted as a whole (Φ still near-uniform)."""
    used = used_gates(logits.detach().float(), causal)
    keep = torch.sigmoid(used)
    low, median, high = torch.quantile(keep.flatten(), torch.tensor([0.1, 0.5, 0.9], device=keep.device)).tolist()
    return {"pruned_fraction": float((keep <= threshold).float().mean()), "mean_keep_probability": float(keep.mean()),
            "keep_probability_p10": low, "keep_probability_p50": median, "keep_probability_p90": high,
            "logit_std": float(used.std())}


def antithetic_masks(noise: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ARM's pair for one draw of U (Yin & Zhou 2019; paper Eq. 10): Z₁ = 𝟙[U > σ(−Φ)], Z₂ = 𝟙[U < σ(Φ)]."""
    return noise > torch.sigmoid(-logits), noise < torch.sigmoid(logits)


@ATTENTION.register("denoiser")
class LearnedMaskAttention(AttentionPart):
    """``base`` attention with Rec-Denoiser's trainable binary mask on its probabilities."""

    @dataclass(frozen=True)
    class Options:
        base: str | dict = "softmax"     # the wrapped attention part; must apply context.probability_gate
        per_head: bool = False           # one Φ per head (H × n × n) instead of one shared by all heads
        init: float = 0.0                # initial Φ: σ(0) = 0.5, symmetric around the 0.5 clip
        sample_scope: Literal["batch", "sequence"] = "batch"  # one U per layer per batch, or per sequence
        inference: MaskInference = "clip_soft"
        threshold: float = 0.5           # inference zeroes gates with σ(Φ) <= threshold
        align: Literal["right", "native"] = "right"  # Φ in left-padded (SASRec) coordinates, or RecBole's

        def validate(self):
            if not 0.0 < self.threshold < 1.0:
                return f"threshold must be in (0, 1), got {self.threshold}"
            try:
                base = parse_part_spec(ATTENTION, self.base, "base")
            except ConfigError as error:
                return str(error)
            if base.name == "denoiser":
                return "base cannot itself be 'denoiser'"
            if not getattr(ATTENTION.get(base.name), "applies_probability_gate", False):
                return f"base attention {base.name!r} does not apply context.probability_gate (softmax-family parts do)"

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        self.base = ATTENTION.build(parse_part_spec(ATTENTION, options.base, "base"), dims, layer_index)
        self.exact_under_trailing_trim = self.base.exact_under_trailing_trim
        # The gate is per (query, key), so its rows at the read positions gate the base's rows there:
        # the last block keeps the base's read-rows shortcut (and the same kernels as the unmasked
        # backbone, whose outputs saturated masks then reproduce bit for bit).
        self.attends_from_read_rows = self.base.attends_from_read_rows
        n = dims.max_seq_length
        self.mask_logits = nn.Parameter(torch.full((dims.n_heads if options.per_head else 1, n, n), options.init))
        self.noise: torch.Tensor | None = None  # U of the latest training pass, [1 or B, heads, n, n]
        self.replay: Literal["antithetic", "same"] | None = None
        self._generator: torch.Generator | None = None

    def reset_part_parameters(self) -> None:
        nn.init.constant_(self.mask_logits, self.options.init)

    def _draw_noise(self, batch: int) -> torch.Tensor:
        device = self.mask_logits.device
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device).manual_seed(torch.initial_seed() + 7919 * (self.layer_index + 1))
        rows = batch if self.options.sample_scope == "sequence" else 1
        return torch.rand((rows, *self.mask_logits.shape), generator=self._generator, device=device)

    def mask(self, batch: int) -> torch.Tensor:
        """[1 or B, heads, n, n] in Φ's coordinates; never differentiable in Φ."""
        logits = self.mask_logits.detach()
        if not self.training:
            return inference_mask(logits, self.options.inference, self.options.threshold)[None]
        if self.replay is None:
            self.noise = self._draw_noise(batch)
        elif self.noise is None or (self.options.sample_scope == "sequence" and self.noise.size(0) != batch):
            raise RuntimeError("replaying a Rec-Denoiser mask needs the noise of a training pass on the same batch")
        first, second = antithetic_masks(self.noise, logits)
        return (first if self.replay == "antithetic" else second).to(logits.dtype)

    def aligned(self, mask: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """Mask in Φ's coordinates → per-sequence gate [B or 1, heads, L, L] for RecBole's positions."""
        length = context.item_seq.size(1)
        n = self.mask_logits.size(-1)
        if length > n:
            raise ValueError(f"sequence length {length} exceeds the mask size {n} (MAX_ITEM_LIST_LENGTH)")
        if self.options.align == "native":
            return mask[..., :length, :length]
        # Left-padded coordinate of RecBole position i in a sequence of `real` items: i + n − real.
        real = context.key_padding.sum(1)
        index = (torch.arange(length, device=mask.device)[None] + (n - real)[:, None]).clamp(max=n - 1)
        batch, heads = index.size(0), mask.size(1)
        rows = torch.arange(batch, device=mask.device) if mask.size(0) == batch else index.new_zeros(batch)
        head = torch.arange(heads, device=mask.device)
        return mask[rows[:, None, None, None], head[None, :, None, None], index[:, None, :, None], index[:, None, None, :]]

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        outer = context.probability_gate
        gate = self.aligned(self.mask(hidden.size(0)), context)
        if context.queries_at_read_rows:
            gate = context.at_read_positions(gate.expand(hidden.size(0), -1, -1, -1))
        context.probability_gate = gate
        if outer is not None:
            context.probability_gate = context.probability_gate * outer
        try:
            return self.base(hidden, context)
        finally:
            context.probability_gate = outer

    def pruned_fraction(self, causal: bool) -> float:
        return pruned_fraction(self.mask_logits.detach(), self.options.threshold, causal)

    def training_statistics(self, causal: bool) -> dict[str, float]:
        """Logged after every training epoch (``RunTrainerMixin``; spec §7: sparsity and σ(Φ) per epoch)."""
        return mask_statistics(self.mask_logits, self.options.threshold, causal)


def mask_parts(model: nn.Module) -> list[LearnedMaskAttention]:
    return [module for module in model.modules() if isinstance(module, LearnedMaskAttention)]


@contextlib.contextmanager
def replaying_masks(parts: Iterable[LearnedMaskAttention], antithetic: bool) -> Iterator[None]:
    """Inside, training passes reuse each part's last U: Z₁ (``antithetic``) or Z₂ = the drawn mask."""
    parts = list(parts)
    for part in parts:
        part.replay = "antithetic" if antithetic else "same"
    try:
        yield
    finally:
        for part in parts:
            part.replay = None


@ATTENTION.register("time_interval")
class TimeIntervalAttention(SoftmaxAttention):
    """TiSASRec's time-interval-aware self-attention (Li et al. 2020, Eq. 7-8).

    Interval and position embeddings are per layer (TiSASRec's code shares one set across blocks),
    and their dropout drops table rows' entries once per batch (the code drops the gathered
    [B, L, L, d] tensors element-wise): same expectation, [B, L, L, d] never materialised.
    """

    attends_from_read_rows = False  # its interval bias is [L, L]

    @dataclass(frozen=True)
    class Options(SoftmaxAttention.Options):
        time_span: int = 256  # k: personalised intervals are clipped to k (TiSASRec default 256)

        def validate(self):
            if self.time_span < 1:
                return f"time_span must be >= 1, got {self.time_span}"
            return SoftmaxAttention.Options.validate(self)

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        size = dims.hidden_size
        self.interval_key = nn.Embedding(options.time_span + 1, size)
        self.interval_value = nn.Embedding(options.time_span + 1, size)
        self.position_key = nn.Embedding(dims.max_seq_length, size)
        self.position_value = nn.Embedding(dims.max_seq_length, size)
        self.table_dropout = Dropout(dims.hidden_dropout_prob, dims.dropout_impl)

    def _per_head(self, table: torch.Tensor) -> torch.Tensor:
        """[rows, D] → [H, rows, d_head] after dropout."""
        return split_heads(self.table_dropout(table)[None], self.dims.n_heads)[0]

    def mix(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        intervals = context.inputs.get("time_intervals")
        if intervals is None:
            raise ValueError("attention 'time_interval' needs time intervals: use it with backbone 'tisasrec'")
        length, heads = query.size(2), query.size(1)
        buckets = intervals.clamp(max=self.options.time_span)[:, None].expand(-1, heads, -1, -1)  # [B, H, L, L]
        key = key + self._per_head(self.position_key.weight[:length])
        value = value + self._per_head(self.position_value.weight[:length])
        # q_i · r^K_ij = (q_i · r^K_b) at b = r_ij: score every interval bucket once, then gather.
        bucket_scores = torch.matmul(query, self._per_head(self.interval_key.weight).transpose(-1, -2))
        scores = torch.matmul(query, key.transpose(-1, -2)) + bucket_scores.gather(-1, buckets)
        scores = scores / self.inverse_scale
        bias = context.position.logit_bias(query, key, context)
        if bias is not None:
            scores = scores + bias
        probs = self.attn_dropout(self.probabilities(scores, context))
        # Σ_j α_ij r^V_ij = Σ_b (Σ_{j: r_ij = b} α_ij) r^V_b: pool the probabilities per bucket.
        bucket_mass = torch.zeros_like(bucket_scores, dtype=probs.dtype).scatter_add_(-1, buckets, probs)
        return torch.matmul(probs, value) + torch.matmul(bucket_mass, self._per_head(self.interval_value.weight))
