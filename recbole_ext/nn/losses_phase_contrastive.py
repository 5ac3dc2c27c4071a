"""EulerFormer's phase contrastive learning, PCL (Tian et al., SIGIR 2024, §3.3, Eq. 14-15).

For every Euler attention layer and for its queries and its keys separately: an InfoNCE over the
positions of each sequence on the rotated phases θ̃ ([B, L, d/2], recorded by attention ``euler``).
The positive of position j is an augmented copy θ̄_j of itself, the negatives are θ̄_{j'} of the
other positions, and similarity is w^T cos(θ̃_j − θ̄_{j'}) / τ with a learned w ∈ R^{d/2} per layer
(initialised to ones, shared by the query and key terms). YAML weight = the paper's ε::

    aux_losses: [{type: phase_contrastive, weight: 1.0e-5, temperature: 1.0}]

Exact form of the authors' code (specs/eulerformer.md §1.5, §6.8), the default: θ̄ = Dropout(θ̃)
with p = 0.5 (kept phases doubled, dropped ones 0; then the positive logit does not depend on the
mask, a quirk kept on purpose), per term −log(e^{S_jj/τ} / (Σ_{j'} e^{S_jj'/τ} + 1e-5)), averaged over
batch and positions, padding included, summed over layers and over queries + keys; gradients flow
through both views. ``reduction: sum`` is the paper's Eq. 14 (sum over positions, divided by the
batch size: N times the code's value); ``stable: true`` uses log-softmax (no +1e-5, no overflow).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn.attention_euler import KEY_PHASES, QUERY_PHASES, EulerAttention
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.losses import AUX_LOSS, AuxLoss


@AUX_LOSS.register("phase_contrastive")
class PhaseContrastiveLoss(AuxLoss):
    """Σ_layers (L_query + L_key) of Eq. 14-15; multiply by ε through the term's ``weight``."""

    wants = frozenset({QUERY_PHASES, KEY_PHASES})
    exact_under_trailing_trim = False  # the code's mean over positions includes padding
    reads_every_final_state = False  # only the attention parts' phase records

    @dataclass(frozen=True)
    class Options:
        temperature: float = 1.0            # τ (the code's ``tep``)
        augmentation_dropout: float = 0.5   # phase-masking rate of the augmented view (fixed 0.5 in the code)
        reduction: Literal["mean", "sum"] = "mean"  # mean over B×N (code) | sum over N, mean over B (paper)
        stable: bool = False                # log-softmax instead of the code's exp(...)/(Σ exp + 1e-5)

        def validate(self):
            if self.temperature <= 0:
                return f"temperature must be > 0, got {self.temperature}"
            if not 0.0 <= self.augmentation_dropout < 1.0:
                return f"augmentation_dropout must be in [0, 1), got {self.augmentation_dropout}"

    def __init__(self, options, model: nn.Module):
        super().__init__(options, model)
        layers = sum(isinstance(module, EulerAttention) for module in model.modules())
        if not layers:
            raise ConfigError("aux_losses: phase_contrastive contrasts the phases of attention 'euler'; "
                              "set attention: {type: euler} (or drop this loss)")
        self.phase_weights = nn.Parameter(torch.ones(layers, model.dims.hidden_size // 2))  # w, one per layer
        self.augment = Dropout(options.augmentation_dropout, model.dims.dropout_impl)

    def reset_part_parameters(self) -> None:
        with torch.no_grad():
            self.phase_weights.fill_(1.0)

    def contrast(self, phases: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Eq. 14 for each of T stacked phase tensors [T, B, L, P] (weights [T, 1, 1, P]) → [T]."""
        augmented = self.augment(phases)
        # S[j, j'] = Σ_t w_t cos(θ_{j,t} − θ̄_{j',t}) = [w cos θ ; w sin θ]_j · [cos θ̄ ; sin θ̄]_{j'}
        anchors = torch.cat((phases.cos() * weight, phases.sin() * weight), dim=-1)
        views = torch.cat((augmented.cos(), augmented.sin()), dim=-1)
        logits = anchors @ views.transpose(-1, -2) / self.options.temperature
        positive = logits.diagonal(dim1=-2, dim2=-1)
        if self.options.stable:
            per_position = torch.logsumexp(logits, dim=-1) - positive
        else:  # −log(e^{S_jj/τ} / (Σ e^{S_jj'/τ} + 1e-5)), as the code writes it
            per_position = torch.log(logits.exp().sum(-1) + 1e-5) - positive
        if self.options.reduction == "sum":
            return per_position.sum(-1).mean(-1)
        return per_position.mean((-2, -1))

    def forward(self, model, interaction, output) -> torch.Tensor:
        queries, keys = output.records.get(QUERY_PHASES), output.records.get(KEY_PHASES)
        if not queries or not keys:
            raise RuntimeError("phase_contrastive: the encoder pass recorded no Euler phases (is attention 'euler'?)")
        # One batched product for all terms: every layer's queries, then its keys. A backbone with
        # several Euler encoders (FDSA) records one entry per layer of each, in call order.
        layer = torch.arange(len(queries), device=self.phase_weights.device) % len(self.phase_weights)
        weights = self.phase_weights[layer.repeat(2)][:, None, None, :]
        return self.contrast(torch.stack(queries + keys), weights).sum()
