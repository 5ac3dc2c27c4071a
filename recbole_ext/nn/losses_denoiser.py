"""Rec-Denoiser's loss terms (Chen et al., RecSys 2022, Eq. 13): ``L = L_rec + β·R_M + γ·R_J``.

Three auxiliary losses, each logged under its name:

- ``mask_gradient`` (weight 1): carries the ARM (Eq. 10) or AR (Eq. 11) estimate of
  ``∇_Φ E_Z[L_rec]`` for the ``denoiser`` attention masks. Its value is always 0; only its gradient
  matters. The main pass uses ``Z₂ = 𝟙[U < σ(Φ)]`` (Algorithm 1) and gives Θ its gradient, and its
  loss is ``f(Z₂)``: ARM replays only ``Z₁`` (same ``U``) under ``torch.no_grad()``, restarting
  torch's random stream where the main pass started so both terms see the same dropout (AR needs
  no replay at all). It returns ``s − s.detach()`` for ``s = Σ_l Σ Φ⁽ˡ⁾ ⊙ c⁽ˡ⁾``, where
  ``c = (f(Z₁) − f(Z₂))(U − ½)`` (ARM) or ``f(Z₂)(1 − 2U)`` (AR). Called without the main pass's
  record (``output.main_pass``, set by ``calculate_loss``), it replays ``Z₂`` too.
- ``mask_l0`` (weight β): ``R_M = Σ_l Σ_{u,v} σ(Φ⁽ˡ⁾_{u,v})``, the expected number of kept gates (Eq. 8).
- ``jacobian_penalty`` (weight γ): ``R_J = Σ_l ‖J⁽ˡ⁾‖_F²`` over the transformer blocks (Eq. 12),
  by Hutchinson's estimator ``‖J‖_F² = E_η ‖Jᵀη‖²``, η ~ N(0, I) on real positions, mean over
  sequences. Works with any backbone: forward hooks on ``model.encoder.blocks`` capture each
  block's input and output in the main pass; one vector-Jacobian product with ``create_graph``
  per block and projection.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn.attention_masked import LearnedMaskAttention, mask_parts, replaying_masks
from recbole_ext.nn.context import AttentionContext
from recbole_ext.nn.losses import AUX_LOSS, AuxLoss


def _require_masks(model: nn.Module, loss: str) -> list[LearnedMaskAttention]:
    parts = mask_parts(model)
    if not parts:
        raise ConfigError(f"aux loss {loss!r} needs the learned attention masks: set attention: {{type: denoiser}}")
    return parts


def arm_coefficients(loss_first: torch.Tensor, loss_second: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Per-gate ARM gradient sample (Eq. 10): (f(𝟙[U > σ(−Φ)]) − f(𝟙[U < σ(Φ)])) · (U − ½)."""
    return (loss_first - loss_second) * (noise - 0.5)


def ar_coefficients(loss: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """Per-gate AR gradient sample (Eq. 11): f(𝟙[U < σ(Φ)]) · (1 − 2U)."""
    return loss * (1.0 - 2.0 * noise)


def surrogate(logits: list[torch.Tensor], coefficients: list[torch.Tensor]) -> torch.Tensor:
    """A zero-valued scalar whose gradient wrt each Φ is its coefficients, summed over sampled rows
    (with per-sequence U every sequence's gates are Bernoulli variables sharing one logit)."""
    total = sum((phi[None] * c.to(phi.dtype)).sum() for phi, c in zip(logits, coefficients))
    return total - total.detach()


@AUX_LOSS.register("mask_gradient")
class MaskGradient(AuxLoss):
    """The ARM/AR surrogate for the mask logits Φ (use weight 1: it is the data term's gradient)."""

    exact_under_trailing_trim = True
    replays_main_pass = True
    reads_every_final_state = False  # only the backbone's loss, replayed
    works_on_windows = True  # f is the backbone's loss, whatever its targets

    @dataclass(frozen=True)
    class Options:
        estimator: Literal["arm", "ar"] = "arm"  # ARM: one replay (Z₁; paper's main results); AR: none
        shared_dropout: bool = True  # f(Z₁) and f(Z₂) see one dropout state (lower variance)
        # f for the estimator: the backbone's mean batch loss times its number of targets for "sum"
        # (Eq. 4 sums over sequences and positions, so β of the paper's grid is weighed against a
        # summed loss), or as is ("mean"). Targets: one per row on prefixes, every position on windows.
        loss_reduction: Literal["sum", "mean"] = "sum"

    def __init__(self, options, model):
        super().__init__(options, model)
        _require_masks(model, "mask_gradient")

    def _scaled(self, loss: torch.Tensor, model, interaction) -> torch.Tensor:
        return loss * model.training_target_count(interaction) if self.options.loss_reduction == "sum" else loss

    def _replayed_loss(self, model, interaction, parts, antithetic: bool, randomness) -> torch.Tensor:
        with randomness(), replaying_masks(parts, antithetic):
            return self._scaled(model.backbone.training_loss(model, interaction)[0], model, interaction)

    def forward(self, model, interaction, output):
        parts = mask_parts(model)
        if not self.training or any(part.noise is None for part in parts):
            return parts[0].mask_logits.new_zeros(())
        main_pass = output.main_pass
        if not self.options.shared_dropout:
            randomness = contextlib.nullcontext  # fresh dropout for the replay
        elif main_pass is not None:
            randomness = main_pass.same_randomness
        else:  # no record of the main pass: replay Z₂ as well, both from the current state
            device = parts[0].mask_logits.device
            randomness = functools.partial(torch.random.fork_rng, devices=[device] if device.type == "cuda" else [])
        with torch.no_grad():
            if main_pass is not None:
                second = self._scaled(main_pass.loss, model, interaction)
            else:
                second = self._replayed_loss(model, interaction, parts, False, randomness)
            if self.options.estimator == "arm":
                first = self._replayed_loss(model, interaction, parts, True, randomness)
                coefficients = [arm_coefficients(first, second, part.noise) for part in parts]
            else:
                coefficients = [ar_coefficients(second, part.noise) for part in parts]
        return surrogate([part.mask_logits for part in parts], coefficients)


@AUX_LOSS.register("mask_l0")
class MaskL0(AuxLoss):
    """Relaxed L0 of the masks (Eq. 8): Σ σ(Φ) over layers (and heads), gates (u, v)."""

    exact_under_trailing_trim = True
    reads_every_final_state = False  # only the mask logits
    works_on_windows = True

    @dataclass(frozen=True)
    class Options:
        reduction: Literal["sum", "mean"] = "sum"  # sum: the paper's; mean: divided by the number of gates

    def __init__(self, options, model):
        super().__init__(options, model)
        _require_masks(model, "mask_l0")

    def forward(self, model, interaction, output):
        logits = [part.mask_logits for part in mask_parts(model)]
        total = sum(torch.sigmoid(phi).sum() for phi in logits)
        return total / sum(phi.numel() for phi in logits) if self.options.reduction == "mean" else total


def hutchinson_frobenius(outputs: torch.Tensor, inputs: torch.Tensor, valid: torch.Tensor | None = None,
                         projections: int = 1) -> torch.Tensor:
    """Mean over the batch of ‖∂outputs/∂inputs‖_F² per sequence, estimated as E_η ‖Jᵀη‖²
    (Hutchinson; Hoffman et al. 2019) with η ~ N(0, I) on the rows where ``valid`` [B, L] is true.
    Differentiable (``create_graph``), so it can be penalised."""
    total = outputs.new_zeros(())
    for _ in range(projections):
        eta = torch.randn_like(outputs)
        if valid is not None:
            eta = eta * valid[..., None].to(eta.dtype)
        (vector_jacobian,) = torch.autograd.grad(outputs, inputs, eta, create_graph=True)
        total = total + vector_jacobian.pow(2).sum()
    return total / (projections * outputs.size(0))


@AUX_LOSS.register("jacobian_penalty")
class JacobianPenalty(AuxLoss):
    """R_J = Σ_l ‖J⁽ˡ⁾‖_F² over the blocks of ``model.encoder`` (Eq. 12), Hutchinson-estimated."""

    exact_under_trailing_trim = True
    works_on_windows = True  # reads the blocks, not the targets

    @dataclass(frozen=True)
    class Options:
        projections: int = 1  # η draws per block and step
        half: bool = False    # multiply by ½ (Hoffman et al.'s convention); the paper has no ½
        # all: Σ over every block (paper); sample: one block drawn uniformly per step, times the
        # number of blocks (an unbiased estimate of the same sum at 1/L of the cost)
        blocks: Literal["all", "sample"] = "all"

        def validate(self):
            if self.projections < 1:
                return f"projections must be >= 1, got {self.projections}"

    def __init__(self, options, model):
        super().__init__(options, model)
        blocks = getattr(getattr(model, "encoder", None), "blocks", None)
        if not blocks:
            raise ConfigError("aux loss 'jacobian_penalty' needs a model with transformer blocks (model.encoder.blocks)")
        self._captured: list[tuple[AttentionContext, torch.Tensor, torch.Tensor]] = []
        for block in blocks:
            block.register_forward_hook(self._capture)

    def _capture(self, block, args, output) -> None:
        if self.training and torch.is_grad_enabled() and len(args) > 1:
            self._captured.append((args[1], args[0], output))

    def forward(self, model, interaction, output):
        pairs = [(x, y) for context, x, y in self._captured if context is output.context]
        self._captured.clear()
        if not pairs:
            return output.states.new_zeros(())
        valid = output.context.key_padding
        if self.options.blocks == "sample":
            scale = len(pairs)
            pairs = [pairs[int(torch.randint(len(pairs), ()))]]
        else:
            scale = 1
        total = scale * sum(hutchinson_frobenius(y, x, valid, self.options.projections) for x, y in pairs)
        return 0.5 * total if self.options.half else total
