"""CL4SRec's crop / mask / reorder on left-aligned batches (``nn/sequence_augmentation.py``)."""
from __future__ import annotations

import collections

import pytest
import torch

from recbole_ext.nn.sequence_augmentation import augment, crop, insert, mask, reorder, share, substitute

MASK = 99


def batch(lengths, width=12):
    """Row r holds items 100·(r+1) + 1 .. + n, then padding."""
    rows = [[100 * (r + 1) + i + 1 for i in range(n)] + [0] * (width - n) for r, n in enumerate(lengths)]
    return torch.tensor(rows), torch.tensor(lengths)


def draws(rows, width=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, generator=generator, dtype=torch.float64),
            torch.rand(rows, width, generator=generator, dtype=torch.float64))


@pytest.mark.parametrize("ratio, n", [(0.29, 100), (0.7, 10), (0.2, 5), (0.6, 5), (0.3, 3), (0.5, 1)])
def test_shares_are_pythons_int_of_ratio_times_n(ratio, n):
    assert int(share(torch.tensor([n]), ratio)) == int(ratio * n)


def test_crop_keeps_a_contiguous_run_left_aligned_and_at_least_one_item():
    seq, lengths = batch([10, 3, 1, 7], width=12)
    starts = collections.Counter()
    for seed in range(200):
        uniform, _ = draws(4, seed=seed)
        cropped, kept = crop(seq, lengths, 0.6, uniform)
        assert kept.tolist() == [6, 1, 1, 4]
        for row in range(4):
            items = cropped[row, : kept[row]]
            assert (cropped[row, kept[row]:] == 0).all()
            start = int((seq[row] == items[0]).nonzero())
            assert torch.equal(items, seq[row, start: start + kept[row]])
            assert start + kept[row] <= lengths[row]
            starts[row, start] += 1
    assert {start for (row, start) in starts if row == 0} == set(range(5))  # every start 0..n−keep is drawn


def test_mask_hides_exactly_its_share_of_real_items_and_nothing_else():
    seq, lengths = batch([10, 3, 1, 7])
    _, scores = draws(4)
    masked = mask(seq, lengths, 0.5, MASK, scores)
    assert (masked == MASK).sum(1).tolist() == [5, 1, 0, 3]
    assert torch.equal(torch.where(masked == MASK, seq, masked), seq)  # the rest stays in place
    assert (masked[seq == 0] == 0).all()


def test_reorder_permutes_one_run_in_place():
    seq, lengths = batch([10, 4, 1])
    orders = set()
    for seed in range(300):
        uniform, scores = draws(3, seed=seed)
        shuffled = reorder(seq, lengths, 0.5, uniform, scores)
        assert torch.equal(shuffled.sort(1).values, seq.sort(1).values)
        moved = (shuffled != seq).nonzero()[:, 1][(shuffled != seq).nonzero()[:, 0] == 0]
        if len(moved):
            assert moved.max() - moved.min() < 5  # within one run of ⌊0.5·10⌋ = 5
        assert torch.equal(shuffled[2], seq[2])
        orders.add(tuple(shuffled[1, :4].tolist()))
    # n = 4, run 2: starts 0..2, each swap or not → the identity and the three adjacent swaps
    assert orders == {(201, 202, 203, 204), (202, 201, 203, 204), (201, 203, 202, 204), (201, 202, 204, 203)}


def test_each_view_draws_every_operation_and_trimmed_columns_see_the_same_view():
    seq, lengths = batch([6] * 300, width=12)
    torch.manual_seed(3)
    view, view_lengths = augment(seq, lengths, ["crop", "mask", "reorder"], {"crop": 0.5, "mask": 0.5, "reorder": 0.5},
                                 MASK, full_length=12)
    cropped = view_lengths == 3
    masked = (view == MASK).any(1)
    assert 70 < cropped.sum() < 130 and 70 < masked.sum() < 130  # about a third each
    assert not (cropped & masked).any()
    torch.manual_seed(3)
    trimmed, trimmed_lengths = augment(seq[:, :6], lengths, ["crop", "mask", "reorder"],
                                       {"crop": 0.5, "mask": 0.5, "reorder": 0.5}, MASK, full_length=12)
    assert torch.equal(trimmed, view[:, :6]) and torch.equal(trimmed_lengths, view_lengths)


# CoSeRec's substitute and insert: item i's neighbour is i + NEAR in these tables; 0 = none.
NEAR = 100_000


def neighbour_table(none=()):
    similar = torch.arange(30_000) + NEAR
    similar[list(none)] = 0
    return similar


def test_substitute_replaces_its_share_of_items_by_their_neighbours_or_random_items():
    seq, lengths = batch([10, 3, 1])
    _, scores = draws(3)
    random_items = torch.full_like(seq, 7)
    substituted = substitute(seq, lengths, 0.3, neighbour_table(none=[102]), scores, random_items)
    changed = substituted != seq
    assert changed.sum(1).tolist() == [3, 1, 1]  # max(⌊0.3·n⌋, 1)
    expected = torch.where(seq == 102, torch.tensor(7), seq + NEAR)
    assert torch.equal(substituted[changed], expected[changed])
    assert (substituted[seq == 0] == 0).all()


def test_insert_puts_each_neighbour_before_its_item_and_keeps_the_latest_items():
    seq, lengths = batch([4, 8], width=10)
    scores = torch.tensor([[0.1, 0.9, 0.2, 0.8] + [0.5] * 6, [0.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.1, 0.05, 0.9, 0.9]],
                          dtype=torch.float64)
    grown, grown_lengths = insert(seq, lengths, 0.5, neighbour_table(), scores, torch.zeros_like(seq))
    # row 0: ⌊0.5·4⌋ = 2 items get a neighbour before them, the two lowest scores (positions 0 and 2)
    assert grown[0, :6].tolist() == [NEAR + 101, 101, 102, NEAR + 103, 103, 104] and grown_lengths[0] == 6
    # row 1: 4 insertions (positions 0, 6, 7 and 1..5's lowest, 1) make 12 items: the oldest 2 go
    full = [NEAR + 201, 201, NEAR + 202, 202, 203, 204, 205, 206, NEAR + 207, 207, NEAR + 208, 208]
    assert grown[1].tolist() == full[2:] and grown_lengths[1] == 10
    assert (grown[0, 6:] == 0).all()


def test_short_sequences_draw_from_their_own_operations():
    seq, lengths = batch([3] * 100 + [8] * 100, width=12)
    torch.manual_seed(0)
    view, view_lengths = augment(seq, lengths, ["crop"], {"crop": 0.5, "substitute": 0.3}, MASK, full_length=12,
                                 similar=neighbour_table(), short_length=4, short_operations=["substitute"])
    assert ((view[:100] > NEAR).sum(1) == 1).all() and torch.equal(view_lengths[:100], lengths[:100])  # substituted
    assert (view_lengths[100:] == 4).all() and (view[100:] < NEAR).all()  # cropped to ⌊0.5·8⌋


def test_views_that_insert_are_the_same_for_a_trimmed_batch():
    seq, lengths = batch([6, 2, 5] * 50, width=12)
    options = dict(operations=["crop", "substitute", "insert"], ratios={"crop": 0.5, "substitute": 0.3, "insert": 0.5, "mask": 0.5},
                   mask_token=MASK, full_length=12, similar=neighbour_table(none=[101]), short_length=2,
                   short_operations=["insert", "mask"])
    torch.manual_seed(4)
    view, view_lengths = augment(seq, lengths, **options)
    torch.manual_seed(4)
    trimmed, trimmed_lengths = augment(seq[:, :6], lengths, **options)
    assert torch.equal(trimmed, view) and torch.equal(trimmed_lengths, view_lengths)
    assert (view_lengths > lengths).any()  # some inserted


def test_similarity_operations_need_a_table():
    seq, lengths = batch([3])
    with pytest.raises(ValueError, match="item-similarity table"):
        augment(seq, lengths, ["insert"], {"insert": 0.5}, MASK, full_length=12)
