"""Data augmentations of item sequences: CL4SRec's crop, mask and reorder (Xie et al., ICDE 2022,
"Data Augmentation Operations"; written from the paper) and CoSeRec's substitute and insert (Liu et
al., 2021, "robust augmentations", which use item-item similarity).

For a sequence of n items (left-aligned in a [B, L] batch, 0 = padding):

* crop: a random contiguous run of ⌊η·n⌋ items (at least one: an empty view has no state to read);
* mask: ⌊γ·n⌋ items at random positions replaced by the [MASK] token;
* reorder: a random contiguous run of ⌊β·n⌋ items shuffled in place;
* substitute: max(⌊α·n⌋, 1) items at random positions replaced by their most similar item;
* insert: before each of max(⌊ρ·n⌋, 1) items at random positions, its most similar item; a view
  longer than L keeps its latest L items (as CoSeRec's code cuts its padded views).

"Most similar" reads a table ``similar`` [items] of one neighbour per item id
(``models/item_similarity.py``); an item without one (never co-occurring) gets a uniformly random
item, as CoSeRec's code does. ⌊·⌋ is taken in float64 as Python's ``int(ratio * n)``, so the counts
match a per-sequence loop. Each view draws one operation per sequence, uniformly from the
configured ones (CL4SRec's and CoSeRec's random choice of augmentation); with ``short_length``,
sequences of at most that many items draw from ``short_operations`` instead (CoSeRec's
``augment_threshold``). Everything is vectorised over the batch on its device.

Random draws are made at ``[B, full_length]`` and cut to the batch's columns: a batch trimmed of
its trailing padding (``models/trimming.py``) then gets the same views as the untrimmed one under
the same seed, which keeps the contrastive loss exact under trimming, not only equal in law.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

Operation = Literal["crop", "mask", "reorder", "substitute", "insert"]
OPERATIONS: tuple[Operation, ...] = ("crop", "mask", "reorder")  # CL4SRec's
SIMILARITY_OPERATIONS: tuple[Operation, ...] = ("substitute", "insert")  # CoSeRec's: they read ``similar``


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


def drawn_positions(scores: torch.Tensor, lengths: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """[B, L] bool: per row, the ``count`` real positions with the lowest random ``scores`` [B, L]
    (a uniform draw of that many positions without replacement)."""
    columns = torch.arange(scores.size(1), device=scores.device)
    rank = scores.masked_fill(columns >= lengths[:, None], 2.0).argsort(1).argsort(1)  # padding ranks last (scores < 1)
    return rank < count[:, None]


def mask(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, mask_token: int, scores: torch.Tensor):
    """⌊γ·n⌋ items, those with the lowest random ``scores`` [B, L] among the real positions, → [MASK]."""
    return item_seq.masked_fill(drawn_positions(scores, lengths, share(lengths, ratio)), mask_token)


def most_similar(items: torch.Tensor, similar: torch.Tensor, random_items: torch.Tensor) -> torch.Tensor:
    """Each item's neighbour in ``similar``; a random item (``random_items``, same shape) where it has none (< 1)."""
    neighbours = similar[items]
    return torch.where(neighbours > 0, neighbours, random_items)


def substitute(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, similar: torch.Tensor,
               scores: torch.Tensor, random_items: torch.Tensor) -> torch.Tensor:
    """max(⌊α·n⌋, 1) items at random positions → their most similar items."""
    chosen = drawn_positions(scores, lengths, share(lengths, ratio).clamp(min=1))
    return torch.where(chosen, most_similar(item_seq, similar, random_items), item_seq)


def insert(item_seq: torch.Tensor, lengths: torch.Tensor, ratio: float, similar: torch.Tensor,
           scores: torch.Tensor, random_items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Before each of max(⌊ρ·n⌋, 1) items at random positions, its most similar item; the latest
    L items of the result, left-aligned, and their count."""
    rows, width = item_seq.shape
    chosen = drawn_positions(scores, lengths, share(lengths, ratio).clamp(min=1))
    real = torch.arange(width, device=item_seq.device)[None, :] < lengths[:, None]
    before = chosen.long().cumsum(1)  # insertions at or before each position
    grown = torch.zeros(rows, 2 * width, dtype=item_seq.dtype, device=item_seq.device)
    row_index = torch.arange(rows, device=item_seq.device)[:, None].expand(-1, width)
    columns = torch.arange(width, device=item_seq.device)[None, :] + before
    grown[row_index[real], columns[real]] = item_seq[real]
    grown[row_index[chosen], columns[chosen] - 1] = most_similar(item_seq, similar, random_items)[chosen]
    grown_lengths = lengths + chosen.sum(1)
    dropped = (grown_lengths - width).clamp(min=0)  # the oldest items that do not fit
    keep = torch.arange(width, device=item_seq.device)[None, :] + dropped[:, None]
    return grown.gather(1, keep), grown_lengths - dropped


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
            ratios: dict[Operation, float], mask_token: int, full_length: int, similar: torch.Tensor | None = None,
            short_length: int = 0, short_operations: tuple[Operation, ...] | list[Operation] = ()
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """One augmented view of the batch: each sequence gets one of ``operations`` (of
    ``short_operations`` when it has at most ``short_length`` items), drawn uniformly.

    ``mask_token`` is the [MASK] id, which is also the number of real item ids (random items are
    drawn below it); ``similar`` the neighbour table substitute and insert read. A batch that may
    insert is widened to ``full_length`` first, so views may grow to the full length.
    """
    used = (*operations, *(short_operations if short_length > 0 else ()))
    if similar is None and any(op in SIMILARITY_OPERATIONS for op in used):
        raise ValueError("substitute and insert need an item-similarity table (similar)")
    if "insert" in used and item_seq.size(1) < full_length:
        item_seq = F.pad(item_seq, (0, full_length - item_seq.size(1)))
    batch, length = item_seq.shape
    device = item_seq.device
    # Per-row draws first, then per-position ones at the full length (see the module docstring). A row
    # goes through one operation, so the operations share the draws.
    if short_length > 0:
        names = list(dict.fromkeys([*operations, *short_operations]))
        short = lengths <= short_length
        pick = torch.rand(batch, device=device, dtype=torch.float64)
        own = [torch.tensor([names.index(op) for op in ops], device=device) for ops in (operations, short_operations)]
        choice = torch.where(short, own[1][(pick * len(short_operations)).long()], own[0][(pick * len(operations)).long()])
    else:  # CL4SRec's stream: one integer per row
        names = list(operations)
        choice = torch.randint(len(operations), (batch,), device=device)
    uniform = torch.rand(batch, device=device, dtype=torch.float64)
    scores = torch.rand(batch, full_length, device=device, dtype=torch.float64)[:, :length]
    random_items = None
    if similar is not None:
        random_items = torch.randint(1, mask_token, (batch, full_length), device=device)[:, :length]
    view, view_lengths = item_seq, lengths
    for index, operation in enumerate(names):
        chosen = choice == index
        if not chosen.any():
            continue
        candidate_lengths = lengths
        if operation == "crop":
            candidate, candidate_lengths = crop(item_seq, lengths, ratios["crop"], uniform)
        elif operation == "mask":
            candidate = mask(item_seq, lengths, ratios["mask"], mask_token, scores)
        elif operation == "reorder":
            candidate = reorder(item_seq, lengths, ratios["reorder"], uniform, scores)
        elif operation == "substitute":
            candidate = substitute(item_seq, lengths, ratios["substitute"], similar, scores, random_items)
        else:
            candidate, candidate_lengths = insert(item_seq, lengths, ratios["insert"], similar, scores, random_items)
        view = torch.where(chosen[:, None], candidate, view)
        view_lengths = torch.where(chosen, candidate_lengths, view_lengths)
    return view, view_lengths
