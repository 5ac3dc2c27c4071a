"""EulerFormer's input-level rotary embedding ψ (Tian et al., SIGIR 2024, §3.1.2, Eq. 5-6).

x_j = e_j + p_j (the learned absolute embedding stays: the paper keeps both), then every complex
pair of x_j is turned by a learned phase: λ_j e^{i(θ_j + ψ_j)}. Multiplying by e^{iψ} is exactly
that, without going through modulus and phase. ψ ∈ R^{N×d/2} is learnable and zero-initialised
(the authors' code; the paper says neither), so at initialisation the part equals
``learned_absolute``, parameter for parameter: Table 5's "w/o rotary embedding" is
``position: learned_absolute``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from recbole_ext.nn.attention_euler import Pairing, rotate_pairs
from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.position_basic import LearnedAbsolutePosition
from recbole_ext.nn.slots import POSITION


@POSITION.register("euler_rotary_input")
class EulerRotaryInput(LearnedAbsolutePosition):
    """Learned absolute position embedding, then a learned per-position phase ψ (Eq. 5-6)."""

    @dataclass(frozen=True)
    class Options:
        pairing: Pairing = "interleaved"  # (2t, 2t+1) as in the authors' code | half: the paper's Eq. 3 split

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        if dims.hidden_size % 2:
            raise ValueError(f"position 'euler_rotary_input' pairs dimensions: hidden size {dims.hidden_size} must be even")
        # A plain Parameter, not an Embedding: the model's normal init never draws for it, so adding
        # this part leaves every other parameter's initial value unchanged.
        self.rotary_embedding = nn.Parameter(torch.zeros(dims.max_seq_length, dims.hidden_size // 2))

    def reset_part_parameters(self) -> None:
        with torch.no_grad():
            self.rotary_embedding.zero_()

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        summed = super().embed_input(item_embedding, context)
        return rotate_pairs(summed, self.rotary_embedding[: summed.size(1)], self.options.pairing)
