"""What the parts of one encoder pass share: sizes, masks, and records for auxiliary losses.

Parts never reach into each other: a position part that acts inside attention is handed to the
attention part through :class:`AttentionContext`, and anything an auxiliary loss needs from inside
a layer (attention probabilities, per-layer states, ...) is written to ``context.records`` only
when some loss asked for it (``context.wants``), so the common path pays nothing; evaluation
passes ask for nothing, since auxiliary losses run in training only (``SeqTransformer.attention_context``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import torch

if TYPE_CHECKING:
    from recbole_ext.nn.slots import PositionPart

# The additive value for a masked logit. RecBole uses -10000: after softmax it is exactly 0 in fp32
# and bf16 like -inf, but a row whose keys are all masked stays finite (uniform) instead of NaN.
MASKED_LOGIT = -10000.0


@dataclass(frozen=True)
class TransformerDims:
    """Sizes and settings shared by every block (RecBole's key names)."""

    hidden_size: int
    n_heads: int
    inner_size: int
    n_layers: int
    hidden_dropout_prob: float
    attn_dropout_prob: float
    hidden_act: str
    layer_norm_eps: float
    max_seq_length: int
    dropout_impl: str = "fast"  # see nn/dropout.py
    block_layout: str = "post_ln"  # see nn/transformer.py

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.n_heads

    @classmethod
    def from_config(cls, config: Any, max_seq_length: int) -> "TransformerDims":
        return cls(
            hidden_size=config["hidden_size"],
            n_heads=config["n_heads"],
            inner_size=config["inner_size"],
            n_layers=config["n_layers"],
            hidden_dropout_prob=config["hidden_dropout_prob"],
            attn_dropout_prob=config["attn_dropout_prob"],
            hidden_act=config["hidden_act"],
            layer_norm_eps=config["layer_norm_eps"],
            max_seq_length=max_seq_length,
            dropout_impl=config["dropout_impl"] or "fast",
            block_layout=config["block_layout"] or "post_ln",
        )


@dataclass
class AttentionContext:
    """Per-pass inputs of the attention slot.

    ``item_seq``: [B, L] item ids, 0 = padding (RecBole left-aligns sequences, padding trails).
    ``causal``: position t may only see positions <= t.
    ``position``: the position part, for its in-attention hooks.
    ``inputs``: extra per-batch tensors a backbone hands to parts (e.g. ``timestamps`` [B, L] for
    time-interval attention), by name; parts that need one raise a clear error when it is absent.
    """

    item_seq: torch.Tensor
    causal: bool
    position: "PositionPart"
    layer_index: int = 0
    wants: frozenset[str] = frozenset()
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    records: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    # Multiplies softmax attention probabilities (broadcastable to [B, H, L, L]) in parts that apply
    # it (``SoftmaxAttention.probabilities``); set by a wrapping part for the duration of its inner call,
    # e.g. Rec-Denoiser's learned binary mask M = A ⊙ Z (``attention_masked.py``). None: unchanged.
    probability_gate: torch.Tensor | None = None
    # Flat indices [T] of the positions of [B, L] that token-wise layers run on (``pack_tokens``: every
    # real one and a few padded, :func:`packed_row_index`; :class:`~recbole_ext.nn.transformer.TransformerBlock`);
    # None: every position.
    packed_rows: torch.Tensor | None = None
    # Flat indices [R] of the positions of [B, L] whose last-layer states the caller reads (the next
    # item's state, BERT4Rec's masks; :meth:`reading`): the last block's token-wise layers run there
    # only (``prune_unread_states``). ``read_positions`` is the caller's [B] or [B, M] form. None: all.
    read_rows: torch.Tensor | None = None
    read_positions: torch.Tensor | None = None
    # Set by the last block around a part that ``attends_from_read_rows``: the part computes the
    # read positions' queries only ([B, H, M, d]; :meth:`at_read_positions`), and the attention mask
    # (:meth:`additive_mask_as`) and probability dropout rows (:meth:`read_probability_rows`) follow.
    queries_at_read_rows: bool = False
    _additive_mask: torch.Tensor | None = None
    _read_rows_in_packed: torch.Tensor | None = None
    _cast_masks: dict[torch.dtype, torch.Tensor] = field(default_factory=dict)

    @property
    def key_padding(self) -> torch.Tensor:
        """[B, L] bool, True for real items."""
        return self.item_seq != 0

    @property
    def additive_mask(self) -> torch.Tensor:
        """[B, 1, L, L] float: 0 where query i may attend key j, ``MASKED_LOGIT`` elsewhere (built once per pass)."""
        if self._additive_mask is None:
            allowed = self.key_padding[:, None, None, :]
            if self.causal:
                length = self.item_seq.size(1)
                allowed = torch.tril(allowed.expand(-1, -1, length, -1))
            zero = torch.zeros((), device=self.item_seq.device)
            self._additive_mask = torch.where(allowed, zero, torch.full_like(zero, MASKED_LOGIT))
        return self._additive_mask

    def additive_mask_as(self, dtype: torch.dtype) -> torch.Tensor:
        """``additive_mask`` in ``dtype`` (e.g. bf16 scores under autocast), cast once per pass, not per
        layer; its rows at the read positions ([B, 1, M, L]) while ``queries_at_read_rows``."""
        mask = self.additive_mask
        if mask.dtype != dtype:
            if dtype not in self._cast_masks:
                self._cast_masks[dtype] = mask.to(dtype)
            mask = self._cast_masks[dtype]
        return self.at_read_positions(mask) if self.queries_at_read_rows else mask

    def at_read_positions(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of x [B, H, L, ...] (H may be 1) at the read positions: [B, H, M, ...]; x unchanged
        when its query dimension is 1 (a mask broadcast over queries: padding only)."""
        if x.size(2) == 1:
            return x
        positions = self.read_positions.view(self.read_positions.size(0), 1, -1, *([1] * (x.dim() - 3)))
        return x.gather(2, positions.expand(-1, x.size(1), -1, *x.shape[3:]))

    def read_probability_rows(self, heads: int) -> "RowSelection":
        """The rows of [B, H, L, L] attention probabilities (flattened to [B·H·L, L]) that the read
        positions' queries own, in [B, H, M] order: dropout draws the full mask and keeps these."""
        batch, length = self.item_seq.shape
        positions = self.read_positions.view(batch, 1, -1)
        starts = torch.arange(batch * heads, device=positions.device).view(batch, heads, 1) * length
        return RowSelection((starts + positions).flatten(), batch * heads * length)

    def reading(self, positions: torch.Tensor) -> "AttentionContext":
        """This context, with the last block restricted to ``positions`` ([B] or [B, M] per row)."""
        length = self.item_seq.size(1)
        offsets = torch.arange(0, self.item_seq.numel(), length, device=positions.device)
        self.read_rows = (positions.view(positions.size(0), -1) + offsets[:, None]).flatten()
        self.read_positions = positions
        return self

    def read_rows_in_packed(self) -> torch.Tensor:
        """Where each read row sits among ``packed_rows`` (the rows of a packed [T, ...] tensor)."""
        if self._read_rows_in_packed is None:
            where = torch.full((self.item_seq.numel(),), -1, dtype=torch.long, device=self.item_seq.device)
            where[self.packed_rows] = torch.arange(self.packed_rows.numel(), device=where.device)
            inside = where[self.read_rows]
            if bool((inside < 0).any()):
                raise RuntimeError("prune_unread_states: a read position is padding (not a packed row); "
                                   "only real positions can be read")
            self._read_rows_in_packed = inside
        return self._read_rows_in_packed

    def record(self, name: str, value: torch.Tensor) -> None:
        """Keep ``value`` (one entry per layer) if an auxiliary loss asked for ``name``."""
        if name in self.wants:
            self.records.setdefault(name, []).append(value)


# Packed row counts are rounded up to a multiple of this share of the batch's positions (B·L / 100).
# Every packed buffer's size follows the row count; if it changed every step, glibc would split the
# free chunks that the big fixed-size buffers (the [B, n_items] logits) need, and the heap would
# keep growing into fresh pages that fault. Rounded, the sizes repeat (docs/performance.md).
PACKED_ROWS_PER_POSITIONS = 100


def packed_row_index(item_seq: torch.Tensor) -> torch.Tensor | None:
    """Flat indices of the positions of ``item_seq`` [B, L] that packed layers run on: every real
    one, then padded ones up to a multiple of B·L / ``PACKED_ROWS_PER_POSITIONS`` rows (computed
    like real rows, never read by them). None when that is every position."""
    real = (item_seq != 0).flatten()
    index = real.nonzero().squeeze(1)
    multiple = -(-real.numel() // PACKED_ROWS_PER_POSITIONS)
    rows = -(-index.numel() // multiple) * multiple
    if rows >= real.numel():
        return None
    if rows > index.numel():
        index = torch.cat((index, (~real).nonzero().squeeze(1)[: rows - index.numel()]))
    return index


def gather_tokens(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """[B, L, ...] → the rows at flat positions ``index``, [T, ...]; unchanged when ``index`` is None."""
    return x if index is None else x.flatten(0, 1).index_select(0, index)


def scatter_tokens(packed: torch.Tensor, index: torch.Tensor, batch_length: tuple[int, int]) -> torch.Tensor:
    """Inverse of :func:`gather_tokens`: [T, ...] rows back to [B, L, ...], zeros elsewhere."""
    batch, length = batch_length
    full = packed.new_zeros((batch * length, *packed.shape[1:]))
    return full.index_copy(0, index, packed).view(batch, length, *packed.shape[1:])


@dataclass(frozen=True)
class RowSelection:
    """The rows ``index`` [R] of a layer's ``total`` input rows that it is computed on; the others
    are never read. Dropout draws its mask for all ``total`` rows and keeps these, so a pruned layer
    consumes the random stream of the full one and keeps the values it would have had there."""

    index: torch.Tensor
    total: int


def on_packed_rows(layer, x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """``layer`` (acting on each position alone) applied to the rows of x [B, L, D] at ``index``
    only; the other positions come out as zeros. Unpacked (``index`` None): ``layer(x)``."""
    if index is None:
        return layer(x)
    return scatter_tokens(layer(gather_tokens(x, index)), index, x.shape[:2])


@dataclass
class MainPassReplay:
    """What an auxiliary loss needs to rerun a training step's main pass with the same randomness:
    the random states before it and its (detached) loss. Rec-Denoiser's ARM estimator reuses the
    main pass as its f(Z₂) and replays only Z₁ under the same dropout (``losses_denoiser.py``)."""

    loss: torch.Tensor
    cpu_state: torch.Tensor
    cuda_state: torch.Tensor | None
    device: torch.device

    @staticmethod
    def random_states(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None, torch.device]:
        """torch's random states now (CPU, and the device's on CUDA): take them before the main pass."""
        return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None, device

    @contextlib.contextmanager
    def same_randomness(self) -> Iterator[None]:
        """Inside, torch's random streams restart where the main pass started; outside, they go on
        as if nothing ran (the replay consumes nothing of the step's stream)."""
        cuda = [self.device] if self.cuda_state is not None else []
        with torch.random.fork_rng(devices=cuda):
            torch.set_rng_state(self.cpu_state)
            if self.cuda_state is not None:
                torch.cuda.set_rng_state(self.cuda_state, self.device)
            yield


@dataclass
class EncoderOutput:
    """Result of one encoder pass: the last layer's states plus whatever losses asked to record."""

    # [B, L, D]; or [R, D] at ``context.read_rows`` when the last block ran at the read positions only.
    states: torch.Tensor
    context: AttentionContext
    # Set by the model's calculate_loss when an auxiliary loss ``replays_main_pass``.
    main_pass: MainPassReplay | None = None

    @property
    def records(self) -> dict[str, list[torch.Tensor]]:
        return self.context.records

    @property
    def hidden(self) -> torch.Tensor:
        """[B, L, D]: every position's state. A pass that read only some positions has no others."""
        if self.context.read_rows is not None:
            raise RuntimeError("this encoder pass computed its last block at the read positions only "
                               "(prune_unread_states): use output.at(positions), or encode without reads")
        return self.states

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """The states at ``positions``: [B] → [B, D], [B, M] → [B, M, D]."""
        if self.context.read_rows is None:
            index = positions.view(positions.size(0), -1, 1).expand(-1, -1, self.states.size(-1))
            return self.states.gather(1, index).view(*positions.shape, -1)
        read = self.context.read_positions
        if positions is not read and not torch.equal(positions, read):
            raise RuntimeError("this encoder pass computed its last block at other positions than those asked for")
        return self.states.view(*positions.shape, -1)
