"""FMLP-Rec's learnable filter (Zhou et al., "Filter-enhanced MLP is All You Need for Sequential
Recommendation", WWW 2022): an attention-free way to mix positions, a baseline of FEARec's Table 2.

Per channel d, the sequence is taken to the frequency domain, multiplied bin by bin by a learned
complex weight W[f, d], and brought back: ``X' = irfft(W ⊙ rfft(X))`` along time, both transforms
orthonormal. That is a learned circular convolution over the whole window, the same for every
user. FMLP-Rec's filter layer is then ``LN(X + Dropout(X'))`` followed by the point-wise
feed-forward with its own residual and norm, which is exactly the block every attention part sits
in (``nn/transformer.py``), so the filter is an attention part: ``attention: {type: filter}``,
and ``FMLPRec`` is a preset on the SASRec backbone (learned absolute positions added at the
input, as FMLP-Rec does). Written from the paper's description; FEARec's spec gives no settings for
it beyond the shared protocol.

The filter has no queries and keys, so it refuses a position part that rotates them or biases
attention logits (they would be ignored without a word). Its convolution wraps around the fixed
window of ``MAX_ITEM_LIST_LENGTH`` positions, padding included, so real positions depend on the
padding and batches keep the full length (like FEARec's FFT).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recbole_ext.nn.attention_fearec import rfft_bins
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.slots import ATTENTION, AttentionPart, PositionPart


@ATTENTION.register("filter")
class LearnableFilter(AttentionPart):
    """``[B, N, D] → irfft(W ⊙ rfft(x, dim=time), n=N)``, W a learned [M, D] complex weight (M = N//2 + 1)."""

    exact_under_trailing_trim = False  # a circular convolution over the whole padded window

    @dataclass(frozen=True)
    class Options:
        init_std: float = 0.02  # W's real and imaginary parts start as N(0, init_std²)

        def validate(self):
            return None if self.init_std > 0 else f"init_std must be > 0, got {self.init_std}"

    def __init__(self, options, dims: TransformerDims, layer_index: int):
        super().__init__(options, dims, layer_index)
        # (real, imaginary) last: a real parameter, so optimisers and weight decay treat it as FMLP-Rec's
        self.complex_weight = nn.Parameter(torch.randn(rfft_bins(dims.max_seq_length), dims.hidden_size, 2)
                                           * options.init_std)

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        position = type(context.position)
        if context.position.rotates_query_key or position.logit_bias is not PositionPart.logit_bias:
            raise ValueError(f"attention (filter) has no queries, keys or logits: position part "
                             f"{position.__name__} would be ignored; use an input-level position "
                             "(learned or sinusoidal) or none")
        length = hidden.size(1)
        if length != self.dims.max_seq_length:
            raise ValueError(f"attention (filter): its weights are for {self.dims.max_seq_length} positions "
                             f"(MAX_ITEM_LIST_LENGTH), got a sequence of {length}")
        # 16-bit inputs (autocast) are transformed in fp32: CUDA's FFT has no bf16 kernels, and the
        # filter is a small share of the step
        work = hidden if hidden.dtype in (torch.float32, torch.float64) else hidden.float()
        spectrum = torch.fft.rfft(work, dim=1, norm="ortho")
        filtered = spectrum * torch.view_as_complex(self.complex_weight.to(work.dtype))
        return torch.fft.irfft(filtered, n=length, dim=1, norm="ortho").to(hidden.dtype)
