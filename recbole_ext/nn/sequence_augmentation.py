"""CL4SRec's data augmentations of item sequences: crop, mask and reorder (Xie et al., ICDE 2022,
"Data Augmentation Operations"; written from the paper).

For a sequence of n items (left-aligned in a [B, L] batch, 0 = padding):

* crop: a random contiguous run of ⌊η·n⌋ items (at least one: an empty view has no state to read);
* mask: ⌊γ·n⌋ items at random positions replaced by the [MASK] token;
* reorder: a random contiguous run of ⌊β·n⌋ items shuffled in place.

⌊·⌋ is taken in float64 as Python's ``int(ratio * n)``, so the counts match a per-sequence loop.
Each view draws one operation per sequence, uniformly from the configured ones (CL4SRec's
random choice of augmentation). Everything is vectorised over the batch on its device.

Random draws are made at ``[B, full_length]`` and cut to the batch's columns: a batch trimmed of
its trailing padding (``models/trimming.py``) then gets the same views as the untrimmed one under
the same seed, which keeps the contrastive loss exact under trimming, not only equal in law.
"""
from __future__ import annotations

from typing import Literal

import torch

Operation = Literal["crop", "mask", "reorder"]
OPERATIONS: tuple[Operation, ...] = ("crop", "mask", "reorder")


def share(lengths: torch.Tensor, ratio: float) -> torch.Tensor:
    """⌊ratio·n⌋ per sequence, as ``int(ratio * n)`` in Python."""
    return torch.floor(lengths.double() * ratio).long()


def random_start(lengths: torch.Tensor, run: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """A uniform start in {0, ..., n − run} per sequence, from ``uniform`` draws in [0, 1)."""
    return torch.minimum((uniform * (lengths - run + 1)).long(), lengths - run).clamp(min=0)


def crop(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, uniform: torch.Tensor):
    """The run of ⌊η·n⌋ (≥ 1) items starting at a random position, left-aligned; new lengths."""
    keep = share(lengths, ratio).clamp(min=1)
    start = random_start(lengths, keep, uniform)
    columns = torch.arange(item_seq.size(1), device=item_seq.device)
    source = (start[:, None] + columns).clamp(max=item_seq.size(1) - 1)
    cropped = item_seq.gather(1, source).masked_fill(columns >= keep[:, None], 0)
    return cropped, keep


def mask(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, mask_token: int, scores: torch.Tensor):
    """⌊γ·n⌋ items, those with the lowest random ``scores`` [B, L] among the real positions, → [MASK]."""
    columns = torch.arange(item_seq.size(1), device=item_seq.device)
    padding = columns >= lengths[:, None]
    rank = scores.masked_fill(padding, 2.0).argsort(1).argsort(1)  # padding ranks last (scores < 1)
    return item_seq.masked_fill(rank < share(lengths, ratio)[:, None], mask_token)


def reorder(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, uniform: torch.Tensor,
            scores: torch.Tensor) -> torch.Tensor:
    """A run of ⌊β·n⌋ items from a random start, permuted by random ``scores`` [B, L]."""
    run = share(lengths, ratio)
    start = random_start(lengths, run, uniform)
    columns = torch.arange(item_seq.size(1), device=item_seq.device)
    inside = (columns >= start[:, None]) & (columns < (start + run)[:, None])
    # Outside the run a position keeps its own index as sort key; inside, the keys are drawn in
    # [start, start + run), which no outside index reaches, so only the run moves.
    keys = torch.where(inside, start[:, None] + scores * run[:, None], columns.double())
    return item_seq.gather(1, keys.argsort(dim=1, stable=True))


def augment(item_seq: torch.Tensor, lengths: torch.Tensor, operations: tuple[Operation, ...] | list[Operation],
            ratios: dict[Operation, float], mask_token: int, full_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One augmented view of the batch: each sequence gets one of ``operations``, drawn uniformly."""
    batch, length = item_seq.shape
    device = item_seq.device
    # Per-row draws first, then per-position ones at the full length (see the module docstring). A row
    # goes through one operation, so the operations share the draws.
    choice = torch.randint(len(operations), (batch,), device=device)
    uniform = torch.rand(batch, device=device, dtype=torch.float64)
    scores = torch.rand(batch, full_length, device=device, dtype=torch.float64)[:, :length]
    view, view_lengths = item_seq, lengths
    for index, operation in enumerate(operations):
        chosen = choice == index
        if operation == "crop":
            candidate, candidate_lengths = crop(item_seq, lengths, ratios["crop"], uniform)
        elif operation == "mask":
            candidate, candidate_lengths = mask(item_seq, lengths, ratios["mask"], mask_token, scores), lengths
        else:
            candidate, candidate_lengths = reorder(item_seq, lengths, ratios["reorder"], uniform, scores), lengths
        view = torch.where(chosen[:, None], candidate, view)
        view_lengths = torch.where(chosen, candidate_lengths, view_lengths)
    return view, view_lengths
