"""CL4SRec's crop / mask / reorder on left-aligned batches (``nn/sequence_augmentation.py``)."""
from __future__ import annotations

import collections

import pytest
import torch

from recbole_ext.nn.sequence_augmentation import augment, crop, mask, reorder, share

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
