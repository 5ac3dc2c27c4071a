"""Context-dependent positions inside attention: CAPE and CoPE.

CAPE (Yuan, Cai & Dong, "A Contextual-Aware Position Encoding for Sequential Recommendation",
WWW 2025 Companion, §4, Eqs. 1-8) and CoPE (Golovneva et al. 2024) count positions with gates
computed from the attention logits themselves, so a key's position is "how many relevant items lie
between it and the query" instead of its index. Both add a scalar bias z[p_ij] to the logits:

- gates (Eq. 1): CAPE ``g = 1 - σ(sim)`` (dissimilar items count as a step), CoPE ``g = σ(sim)``;
- positions (Eq. 2): ``p_ij = Σ_{k=j}^{n} g_ik``, a reverse cumulative sum over the keys, clamped to
  the last integer slot;
- the query is mapped into position space (Eq. 5): CAPE ``t' = SiLU(W t + b)`` to ``d_pos``; CoPE
  uses the query itself (``pos_dim: null`` here);
- the scalar table (Eq. 6) ``z[p] = t'ᵀ e[p]`` is computed once per query for the integer slots,
  then interpolated at the fractional positions (Eq. 3/7), never materialising ``e[p_ij]``.

One :class:`ContextualPositionBias` is one attention layer's machinery (its own table and
projection, shared by the layer's heads); it works for any logits, so the target-attention models
(:mod:`recbole_ext.models.target_attention`) reuse it with DIN's MLP scores. The position parts
``cape``/``cope`` hold one per layer and act through the ``logit_bias`` hook.

Gate masking (spec §1.4): ``strict`` (default) zeroes the gates of keys the query may not see
(padding; future items under a causal mask), as Eq. 2 sums only real context items. ``official``
reproduces the authors' code, which computes gates from the already-masked logits: a masked key then
adds a full step (CAPE, 1 - σ(-inf) = 1) or nothing (CoPE, σ(-inf) = 0), so CAPE's positions depend
on how much padding follows a key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.nn.context import AttentionContext, TransformerDims
from recbole_ext.nn.position_basic import LearnedAbsolutePosition
from recbole_ext.nn.registry import NoOptions
from recbole_ext.nn.slots import POSITION, PositionPart

Gate = Literal["dissimilarity", "similarity"]
GateMask = Literal["strict", "official"]


def reverse_cumsum(gates: torch.Tensor) -> torch.Tensor:
    """Eq. 2: p_j = Σ_{k=j}^{n} g_k along the last (key) dimension."""
    return gates.flip(-1).cumsum(-1).flip(-1)


def interpolate_scalar_table(table_scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Eq. 7: z[p] = (p - ⌊p⌋) z[⌈p⌉] + (1 - p + ⌊p⌋) z[⌊p⌋], by two gathers from z[0..n_pos-1].

    ``table_scores`` [..., Nq, n_pos], ``positions`` [..., Nq, Nk] in [0, n_pos - 1]. Gradient
    reaches the gates only through the fractional weight (floor/ceil are indices), as in CoPE.
    """
    floor = positions.detach().floor()
    lower = floor.long()
    # At an integer p the upper slot's weight is 0, so ⌊p⌋ + 1 stands in for ⌈p⌉ (one rounding op fewer).
    upper = (lower + 1).clamp_(max=table_scores.size(-1) - 1)
    batch_shape = torch.broadcast_shapes(table_scores.shape[:-1], positions.shape[:-1])
    table_scores = table_scores.expand(*batch_shape, table_scores.size(-1))
    lower, upper = lower.expand(*batch_shape, lower.size(-1)), upper.expand(*batch_shape, upper.size(-1))
    return torch.lerp(table_scores.gather(-1, lower), table_scores.gather(-1, upper), positions - floor)


class ContextualPositionBias(nn.Module):
    """One attention layer's CAPE/CoPE: (query, logits) → an additive logit bias z[p_ij].

    ``query_size``: size of one query vector (d_head in self-attention, the target item's size in
    target attention). ``position_size``: d_pos of CAPE's projection (Eq. 5); None = CoPE, no
    projection, the table has ``query_size`` rows. ``n_positions``: integer slots 0 … n_pos - 1.
    """

    def __init__(self, query_size: int, n_positions: int, position_size: int | None, gate: Gate = "dissimilarity"):
        super().__init__()
        if n_positions < 2:
            raise ValueError(f"a contextual position table needs at least 2 slots, got {n_positions}")
        self.gate = gate
        self.projection = nn.Linear(query_size, position_size) if position_size is not None else None
        # e[p] as columns: (d_pos, n_pos) as in the authors' code; zero so an untrained model has no bias.
        self.table = nn.Parameter(torch.zeros(position_size or query_size, n_positions))

    @property
    def n_positions(self) -> int:
        return self.table.size(-1)

    def reset_part_parameters(self) -> None:
        """Zero table (authors' code): with it CAPE/CoPE add exactly 0, i.e. the no-PE model."""
        nn.init.zeros_(self.table)

    def gates(self, logits: torch.Tensor) -> torch.Tensor:
        """Eq. 1, in fp32: the cumulative sum would accumulate bf16/fp16 rounding over the keys."""
        similarity = torch.sigmoid(logits.float())
        return 1.0 - similarity if self.gate == "dissimilarity" else similarity

    def positions(self, logits: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Eq. 2 with the clamp to the last slot; ``valid`` (bool, broadcastable) zeroes masked keys' gates."""
        gates = self.gates(logits)
        if valid is not None:
            gates = gates * valid
        return reverse_cumsum(gates).clamp_(max=self.n_positions - 1)

    def table_scores(self, query: torch.Tensor) -> torch.Tensor:
        """Eqs. 5-6: z[p] = t'ᵀ e[p] for every integer slot, [..., Nq, n_pos]."""
        target = query if self.projection is None else F.silu(self.projection(query))
        return torch.matmul(target, self.table.to(target.dtype))

    def forward(self, query: torch.Tensor, logits: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """``query`` [..., Nq, query_size], ``logits`` [..., Nq, Nk] → bias [..., Nq, Nk] (logits' dtype)."""
        bias = interpolate_scalar_table(self.table_scores(query).float(), self.positions(logits, valid))
        return bias.to(logits.dtype)


@POSITION.register("cape")
class ContextualPosition(PositionPart):
    """CAPE in every self-attention layer: one table and projection per layer, shared by its heads.

    The gates use the layer's attention logits q·k/√d_head (sim = sim_item, as the authors' code);
    they are recomputed from the rotated per-head queries and keys the hook receives, which equals
    the logits of ``softmax`` attention at its default scale.
    """

    @dataclass(frozen=True)
    class Options:
        # d_pos of the projection t' = SiLU(W q + b) (Eq. 5); null = no projection (CoPE's form).
        pos_dim: int | None = 64
        # Integer position slots; null = max_seq_length + 1, so no position is ever clamped.
        max_positions: int | None = None
        gate: Gate = "dissimilarity"  # CAPE: 1 - σ(sim) | similarity: CoPE's σ(sim) (ablation)
        gate_mask: GateMask = "strict"  # strict: masked keys add no step | official: the authors' code
        keep_absolute: bool = False  # also add the learned absolute embedding at the input (BST grid)

        def validate(self):
            if self.pos_dim is not None and self.pos_dim < 1:
                return f"pos_dim must be >= 1 or null, got {self.pos_dim}"
            if self.max_positions is not None and self.max_positions < 2:
                return f"max_positions must be >= 2 or null, got {self.max_positions}"

    def __init__(self, options, dims: TransformerDims):
        super().__init__(options, dims)
        n_positions = options.max_positions or dims.max_seq_length + 1
        self.layers = nn.ModuleList(
            ContextualPositionBias(dims.head_size, n_positions, options.pos_dim, options.gate)
            for _ in range(dims.n_layers)
        )
        self.absolute = LearnedAbsolutePosition(NoOptions(), dims) if options.keep_absolute else None
        self.logit_scale = 1.0 / math.sqrt(dims.head_size)
        # Official gates count masked trailing keys, so real positions depend on the padded length.
        self.exact_under_trailing_trim = options.gate_mask == "strict"

    def embed_input(self, item_embedding: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        return item_embedding if self.absolute is None else self.absolute.embed_input(item_embedding, context)

    def logit_bias(self, query: torch.Tensor, key: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        logits = torch.matmul(query, key.transpose(-1, -2)) * self.logit_scale
        mask = context.additive_mask  # [B, 1, L, L]: 0 where query i may see key j
        if self.options.gate_mask == "official":
            return self.layers[context.layer_index](query, logits + mask, None)
        return self.layers[context.layer_index](query, logits, mask == 0)


@POSITION.register("cope")
class ContextualPositionCoPE(ContextualPosition):
    """CoPE (Golovneva et al. 2024): gates σ(q·k), the query itself scores the table (no projection)."""

    @dataclass(frozen=True)
    class Options(ContextualPosition.Options):
        pos_dim: int | None = None
        gate: Gate = "similarity"
