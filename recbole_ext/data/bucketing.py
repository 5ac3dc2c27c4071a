"""Length-bucketed training batches ("sortish" sampling), for models that trim trailing padding.

RecBole shuffles training rows uniformly, so almost every batch of 2048 contains some sequence of
the maximum length and trimming (``models/trimming.py``) saves little. With
``length_bucketing: K`` each epoch shuffles the rows, cuts the permutation into pools of K
batches, sorts each pool by sequence length, splits it into batches and shuffles the batch
order. Every row is still seen once per epoch in batches of ``train_batch_size`` (one partial
batch per epoch, as RecBole), but a batch's rows have similar lengths; K trades batch diversity
(K = 1: RecBole's batches, reordered inside) against padding (large K: near-uniform lengths).

The permutation draws from the loader's own generator (RecBole seeds it with ``seed``), so runs
repeat exactly; batches are built by the loader's ``collate_fn`` (its transform and negative
sampling included).
"""
from __future__ import annotations

from collections.abc import Iterator

import torch


def bucketed_index_batches(lengths: torch.Tensor, batch_size: int, pool_batches: int,
                           generator: torch.Generator) -> list[torch.Tensor]:
    """Row indices of one epoch's batches; see the module docstring."""
    if batch_size < 1 or pool_batches < 1:
        raise ValueError(f"batch_size and pool_batches must be >= 1, got {batch_size} and {pool_batches}")
    permutation = torch.randperm(lengths.numel(), generator=generator)
    pool_size = batch_size * pool_batches  # a multiple of the batch size: only the epoch's last batch is partial
    batches: list[torch.Tensor] = []
    for pool in permutation.split(pool_size):
        pool = pool[torch.argsort(lengths[pool], stable=True)]
        batches.extend(pool.split(batch_size))
    order = torch.randperm(len(batches), generator=generator)
    return [batches[i] for i in order.tolist()]


def bucketed_batches(train_data, pool_batches: int, length_field: str) -> Iterator:
    """One epoch of ``train_data`` (a RecBole training loader) in length-bucketed batches."""
    lengths = train_data._dataset.inter_feat[length_field]
    for indices in bucketed_index_batches(lengths, train_data.step, pool_batches, train_data.generator):
        yield train_data.collate_fn(indices.tolist())


class BucketedEpoch:
    """Iterable with ``len`` (tqdm and RecBole's progress bar use it) over :func:`bucketed_batches`."""

    def __init__(self, train_data, pool_batches: int, length_field: str):
        self.train_data, self.pool_batches, self.length_field = train_data, pool_batches, length_field

    def __len__(self) -> int:
        return len(self.train_data)

    def __iter__(self):
        return bucketed_batches(self.train_data, self.pool_batches, self.length_field)
