"""Packing indices (``pack_tokens``): which positions token-wise layers run on."""
from __future__ import annotations

import torch

from recbole_ext.nn.context import (PACKED_ROWS_PER_POSITIONS, gather_tokens, on_packed_rows,
                                    packed_row_index, scatter_tokens)


def left_aligned(lengths: list[int], width: int) -> torch.Tensor:
    return torch.stack([torch.cat((torch.arange(1, n + 1), torch.zeros(width - n, dtype=torch.long)))
                        for n in lengths])


def test_index_holds_every_real_position_then_padded_ones_up_to_the_rounding():
    lengths = [int(n) for n in torch.randint(1, 9, (64,), generator=torch.Generator().manual_seed(0))]
    item_seq = left_aligned(lengths, 50)  # 3200 positions: rows rounded up to a multiple of 32
    index = packed_row_index(item_seq)
    multiple = -(-item_seq.numel() // PACKED_ROWS_PER_POSITIONS)
    real = sum(lengths)
    assert index.numel() % multiple == 0 and real <= index.numel() < real + multiple
    flat = item_seq.flatten()
    assert torch.equal(index[:real], (flat != 0).nonzero().squeeze(1))  # real ones first, in order
    assert bool((flat[index[real:]] == 0).all())
    assert index.unique().numel() == index.numel()


def test_no_index_when_the_rounded_rows_cover_every_position():
    assert packed_row_index(left_aligned([50] * 4, 50)) is None
    assert packed_row_index(left_aligned([50, 50, 50, 49], 50)) is None  # 199 real rows round up to 200


def test_packed_layers_see_only_indexed_rows_and_padding_comes_back_zero():
    item_seq = left_aligned([3, 1, 5, 2], 6)
    index = packed_row_index(item_seq)
    x = torch.randn(4, 6, 3)
    out = on_packed_rows(lambda rows: rows * 2 + 1, x, index)
    expected = torch.zeros_like(x).flatten(0, 1)
    expected[index] = x.flatten(0, 1)[index] * 2 + 1
    assert torch.equal(out, expected.view_as(x))
    assert torch.equal(scatter_tokens(gather_tokens(x, index), index, (4, 6)).flatten(0, 1)[index], x.flatten(0, 1)[index])
    assert on_packed_rows(lambda rows: rows + 1, x, None).equal(x + 1)
