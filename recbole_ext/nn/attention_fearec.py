"""FEARec's hybrid attention (Du et al., SIGIR 2023, §3.2): frequency ramp bands, time-domain
attention (TDA) on band-filtered Q/K/V and frequency-domain auto-correlation attention (FDA).

One part, ``attention: {type: fearec, ...}``; every paper switch and Table 3 ablation is an option.
Defaults follow the authors' code (sudaada/FEARec, identical to RecBole 1.2.1's ``HybridAttention``)
where it departs from the paper, with options for the paper's reading
(see ``docs/fearec.md`` and ``shared/specs/fearec.md`` §1.2–1.3):

* bands come from the code's formula (floor/truncation), not the paper's real-valued Eq. 3–9;
* FDA rolls the un-filtered V (``fda_filtered_value: true`` = Eq. 17's Ṽ) over the padded window
  without a mask (``fda_padding_mask: true`` zeroes padded positions first);
* FDA lags are shared by the batch in training, per sample at evaluation
  (``fda_train_lags: per_sample`` uses per-sample lags in training too);
* TDA divides logits by √d_head like the code (``scale`` as for ``softmax``; the paper's Eq. 11 is 1/√D).

Bugs of the code that are fixed here, not optional: ``irfft`` gets n=N (odd lengths work), one
layer works (full band), and k = int(m·ln N) must lie in [1, N] (a clear error, not a torch crash).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import torch

from recbole_ext.nn.attention_softmax import SoftmaxAttention, merge_heads, split_heads
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.slots import ATTENTION


def rfft_bins(length: int) -> int:
    """M, the number of rfft bins of a length-N real signal (the paper's ⌈N/2⌉+1 is wrong for odd N)."""
    return length // 2 + 1


@lru_cache(maxsize=None)
def ramp_band(length: int, n_layers: int, global_ratio: float, layer_index: int) -> tuple[int, int]:
    """Bins [left, right) that layer ``layer_index`` (0 = bottom) keeps: the frequency ramp.

    Paper Eq. 3–9: the bottom layer keeps the highest band, the band slides towards the lowest
    frequencies in the top layer. With α > 1/L bands are α·M wide and overlap ("mode 2"), otherwise
    L disjoint bands of M/L bins. The arithmetic is the authors' (float floor division for the step,
    ``int`` truncation of the ends), so bands match their code bin for bin, including the dropped
    DC bin of some L ≥ 3 settings. One layer, which crashed their code, keeps every bin.
    """
    bins = rfft_bins(length)
    if n_layers > 1 and global_ratio > 1 / n_layers:
        width, step = global_ratio, (bins * (1 - global_ratio)) // (n_layers - 1)
    else:
        width, step = 1 / n_layers, bins / n_layers
    return int(bins * (1 - width) - layer_index * step), int(bins - layer_index * step)


def band_pass(spectrum: torch.Tensor, band: tuple[int, int], dim: int) -> torch.Tensor:
    """Zero every bin outside [left, right) along ``dim`` (Eq. 14's "padding" of the sampled band)."""
    left, right = band
    bins = spectrum.size(dim)
    if left <= 0 and right >= bins:
        return spectrum
    keep = torch.zeros(bins, device=spectrum.device, dtype=spectrum.real.dtype)
    keep[left:right] = 1
    return spectrum * keep.view(-1, *([1] * (spectrum.dim() - dim % spectrum.dim() - 1)))


def topk_lag_count(topk_factor: float, length: int) -> int:
    """k = ⌊m · ln N⌋ (Eq. 15, natural log of the padded window length, as the authors' code)."""
    return int(topk_factor * math.log(length))


def topk_problem(lags: int, length: int) -> str:
    """Why k lags cannot be drawn from a window of ``length`` (the bounds on m that would work)."""
    bounds = (f"{1 / math.log(length):.3g} <= topk_factor <= {length / math.log(length):.3g}"
              if length > 1 else "a window of one position has no lags to choose")
    return f"gives k = int(m·ln N) = {lags} lags for N={length}; k must be in [1, N] ({bounds})"


@lru_cache(maxsize=64)
def band_filter_matrix(length: int, band: tuple[int, int]) -> torch.Tensor | None:
    """[N, N] real P with P @ x = irfft(band_pass(rfft(x)), n=N) along time; None for the full band.

    Keeping a band is linear and shift-invariant, so it is one small circulant matrix: on CPU a
    batched matmul with it is much cheaper than an rfft/irfft pair of length N (not a power of two)
    along a strided axis. Built once per (N, band) from the FFT itself, so it is exact for odd N too.
    """
    if band[0] <= 0 and band[1] >= rfft_bins(length):
        return None
    identity = torch.eye(length, dtype=torch.float64)
    return torch.fft.irfft(band_pass(torch.fft.rfft(identity, dim=0), band, dim=0), n=length, dim=0).float()


@lru_cache(maxsize=16)
def _lag_gather_indices(length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat indices into an [N, N] score matrix: ``by_lag[τ·N + t] = ((t+τ) mod N)·N + t`` (the pairs
    each lag sums) and ``lag_of[r·N + t] = (r − t) mod N`` (the lag each pair belongs to)."""
    positions = torch.arange(length, device=device)
    by_lag = ((positions[None, :] + positions[:, None]) % length) * length + positions[None, :]
    lag_of = (positions[:, None] - positions[None, :]) % length
    return by_lag.flatten(), lag_of.flatten()


class _CircularLagSums(torch.autograd.Function):
    """Each pair (r, t) belongs to exactly one lag, so the gradient is a gather, not the scatter-add
    with duplicate handling that autograd derives for advanced indexing (that was a visible share of
    FEARec's CPU step). The backward is built from differentiable ops, so double backward works."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor) -> torch.Tensor:
        batch, length, _ = scores.shape
        by_lag, _ = _lag_gather_indices(length, scores.device)
        ctx.length = length
        return scores.reshape(batch, -1).index_select(1, by_lag).view(batch, length, length).sum(-1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        _, lag_of = _lag_gather_indices(ctx.length, grad.device)
        return grad.index_select(1, lag_of).view(-1, ctx.length, ctx.length)


def circular_lag_sums(scores: torch.Tensor) -> torch.Tensor:
    """[B, N, N] S[t', t] → [B, N] c[τ] = Σ_t S[(t+τ) mod N, t] (circular cross-correlation from all pairs)."""
    return _CircularLagSums.apply(scores)


def lag_matrix(lags: torch.Tensor, weights: torch.Tensor, length: int) -> torch.Tensor:
    """[B, N, N] A with A @ V = Σ_j w_j · Roll(V, τ_j), Roll(V, τ)[t] = V[(t+τ) mod N] (Eq. 13/17).

    ``lags`` [B or 1, k], ``weights`` [B, k]; one batched matmul replaces k rolls, for shared and
    per-sample lags alike.
    """
    batch = weights.size(0)
    positions = torch.arange(length, device=weights.device)
    columns = (positions[None, :, None] + lags[:, None, :]) % length  # [B|1, N, k]
    matrix = torch.zeros(batch, length, length, device=weights.device, dtype=weights.dtype)
    return matrix.scatter_add(2, columns.expand(batch, -1, -1), weights[:, None, :].expand(-1, length, -1))


@ATTENTION.register("fearec")
class FrequencyHybridAttention(SoftmaxAttention):
    """(1 − γ)·FDA + γ·TDA with one shared Q/K/V and output projection (Eq. 18, authors' layout).

    TDA is the standard softmax attention (causal and padding masks, position bias, dropout on the
    probabilities) applied to Q̃, K̃, Ṽ: the inputs with only this layer's band kept (Eq. 10–12).
    FDA is Autoformer's auto-correlation: Q·conj(K) on the band (Eq. 14), back to lags by an
    inverse FFT, averaged over heads and channels (Eq. 15), the top-k lags' softmax weights
    aggregating V rolled by each lag (Eq. 16–17).
    """

    attends_from_read_rows = False  # its FFT mixes every position's queries

    # Circular correlation and rolls over the whole padded window: real positions depend on the padding.
    exact_under_trailing_trim = False

    @dataclass(frozen=True)
    class Options(SoftmaxAttention.Options):
        global_ratio: float = 0.8  # α: band width as a share of the M rfft bins (Fig. 5); 1 = no ramp
        topk_factor: float = 1.0  # m: FDA keeps k = int(m·ln N) lags (Fig. 6)
        spatial_ratio: float = 0.1  # γ: weight of the time-domain branch in the fusion (Table 4)
        dual_domain: bool = True  # TDA on (false = Table 3 "w/o TDA": FDA only)
        fda: bool = True  # FDA on (false = Table 3 "w/o FDA": TDA only, as γ = 1 but without computing FDA)
        std: bool = True  # TDA sees only this layer's band (false = "w/o STD": all bins)
        sfd: bool = True  # FDA sees only this layer's band (false = "w/o SFD": all bins; no flag in the authors' code)
        fda_filtered_value: bool = False  # paper Eq. 17: FDA rolls the band-filtered Ṽ (code: raw V)
        fda_padding_mask: bool = False  # zero padded positions of Q, K, V before the FDA's FFT (code: no mask)
        fda_train_lags: Literal["shared", "per_sample"] = "shared"  # code: one lag set per training batch

        def validate(self):
            problem = super().validate()
            if problem:
                return problem
            if not 0 < self.global_ratio <= 1:
                return f"global_ratio must be in (0, 1], got {self.global_ratio}"
            if self.topk_factor <= 0:
                return f"topk_factor must be > 0, got {self.topk_factor}"
            if not 0 <= self.spatial_ratio <= 1:
                return f"spatial_ratio must be in [0, 1], got {self.spatial_ratio}"
            if not (self.dual_domain or self.fda):
                return "dual_domain (TDA) and fda are both off: keep at least one branch"
            return None

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        length = dims.max_seq_length
        self.check_length(length)
        band = ramp_band(length, dims.n_layers, options.global_ratio, layer_index)
        if band[1] <= band[0]:
            raise ValueError(f"attention (fearec): layer {layer_index} gets an empty frequency band {band} "
                             f"(MAX_ITEM_LIST_LENGTH={length}, n_layers={dims.n_layers}, global_ratio="
                             f"{options.global_ratio}); use a longer sequence, fewer layers or a larger global_ratio")
        self.band = band
        full = (0, rfft_bins(length))
        for name, on in (("time_filter", options.std), ("frequency_filter", options.sfd)):
            self.register_buffer(name, band_filter_matrix(length, band if on else full), persistent=False)
        # Fusion weights; one branch off = the other alone (Eq. 18 with γ = 0 or 1).
        self.time_weight = options.spatial_ratio if options.fda else 1.0
        if not options.dual_domain:
            self.time_weight = 0.0

    def check_length(self, length: int) -> None:
        lags = topk_lag_count(self.options.topk_factor, length)
        if self.options.fda and not 1 <= lags <= length:
            raise ValueError(f"attention (fearec): topk_factor={self.options.topk_factor} {topk_problem(lags, length)}")

    def filters_for(self, length: int, device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(time filter, frequency filter) band matrices for the input length (N in a model; tests vary it)."""
        if length == self.dims.max_seq_length:
            return self.time_filter, self.frequency_filter
        self.check_length(length)
        band = ramp_band(length, self.dims.n_layers, self.options.global_ratio, self.layer_index)
        full = (0, rfft_bins(length))
        filters = [band_filter_matrix(length, band if on else full) for on in (self.options.std, self.options.sfd)]
        return tuple(None if f is None else f.to(device) for f in filters)

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        if context.position.rotates_query_key:  # rotate per head first: the band filter sees rotated Q, K
            return super().forward(hidden, context)
        return self.dense(self.hybrid(self.project_stacked(hidden), context))

    def mix(self, query, key, value, context: AttentionContext) -> torch.Tensor:
        """The per-head interface ([B, H, N, d] each → [B, H, N, d]); ``forward`` skips the round trip."""
        stacked = torch.cat([merge_heads(x) for x in (query, key, value)], dim=-1)
        return split_heads(self.hybrid(stacked, context), self.dims.n_heads)

    def hybrid(self, stacked: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        """Eq. 18 on Q | K | V side by side ([B, N, 3·D] → [B, N, D], heads merged).

        Working before the heads are split lets one product along time filter Q, K and V together
        and lets the FDA's contractions over heads and channels run as plain batched matmuls on
        views, where the per-head layout cost broadcast copies on CPU.
        """
        time_filter, frequency_filter = self.filters_for(stacked.size(1), stacked.device)
        mixed = 0.0
        if self.time_weight > 0:
            # Eq. 10: Q̃, K̃, Ṽ keep only the layer's band; then ordinary masked softmax attention (Eq. 11–12).
            filtered = stacked if time_filter is None else torch.matmul(time_filter.to(stacked.dtype), stacked)
            mixed = self.time_weight * merge_heads(super().mix(*self.unstack_heads(filtered), context))
        if self.time_weight < 1:
            if self.options.fda_padding_mask:
                stacked = stacked * context.key_padding[:, :, None].to(stacked.dtype)
            query, key, value = stacked.split(self.dims.hidden_size, dim=-1)
            mixed = mixed + (1 - self.time_weight) * self.frequency_attention(query, key, value, frequency_filter)
        return mixed

    def frequency_attention(self, query, key, value, band_filter) -> torch.Tensor:
        """FDA, Eq. 13–17, heads side by side: [B, N, H·d] each → [B, N, H·d]."""
        length, size = query.shape[1:]
        # Eq. 14–15: irfft(band(Q·conj K)) averaged over heads and channels is the band-filtered
        # circular cross-correlation c[τ] = Σ_t q[(t+τ) mod N]·k[t] / (H·d), from all position pairs.
        pairs = torch.bmm(query, key.transpose(1, 2)).float()
        correlation = circular_lag_sums(pairs) / size  # [B, N]
        if band_filter is not None:
            correlation = correlation @ band_filter.T
        lag_count = topk_lag_count(self.options.topk_factor, length)
        if self.training and self.options.fda_train_lags == "shared":
            lags = torch.topk(correlation.mean(0), lag_count).indices[None]  # [1, k]: one set for the batch
            weights = torch.softmax(correlation[:, lags[0]], dim=-1)  # [B, k]
        else:
            scores, lags = torch.topk(correlation, lag_count, dim=-1)  # [B, k]
            weights = torch.softmax(scores, dim=-1)
        aggregate = lag_matrix(lags, weights, length)  # [B, N, N]
        if self.options.fda_filtered_value and band_filter is not None:
            aggregate = aggregate @ band_filter  # Eq. 17 rolls Ṽ = P·V
        return torch.bmm(aggregate.to(value.dtype), value)
