"""RecBole's sequential data augmentation (every prefix of a user's history is a training row),
computed with tensor ops instead of a Python loop over every interaction.

``SequentialDataset.data_augmentation`` walks the interactions one by one and then copies each
prefix into its row one row at a time: most of what ``data_preparation`` takes for ML-1M (1M
interactions), before every run (``benchmarks/startup.py``; docs/performance.md, "Start-up"). The rows are the same closed form
for every interaction ``i`` after its user's first, ``g``: the prefix starts at
``max(g, i - MAX_ITEM_LIST_LENGTH)`` and ends before ``i``. :func:`data_augmentation` builds them
that way, in chunks of rows so the gather index never outgrows the output; its output equals
RecBole's tensor for tensor (``tests/data/test_augmentation.py``). ``compat.apply`` installs it.
"""
from __future__ import annotations

import numpy as np
import torch

CHUNK_ROWS = 1 << 16  # rows gathered at once: the index is CHUNK_ROWS x MAX_ITEM_LIST_LENGTH int64


def prefix_rows(uids: np.ndarray, max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For interactions sorted by user (then time): each training row's target index, the index
    where its prefix starts, and the prefix length, exactly as RecBole's loop computes them."""
    positions = np.arange(len(uids))
    first = np.ones(len(uids), dtype=bool)
    first[1:] = uids[1:] != uids[:-1]
    group_start = np.maximum.accumulate(np.where(first, positions, 0))
    targets = positions[~first]
    starts = np.maximum(group_start[targets], targets - max_length)
    return targets, starts, targets - starts


def gather_prefixes(value: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor,
                    out: torch.Tensor) -> torch.Tensor:
    """``out[k, :lengths[k]] = value[starts[k] : starts[k] + lengths[k]]``, the rest of ``out`` zero."""
    width = out.size(1)
    offsets = torch.arange(width)
    for begin in range(0, len(starts), CHUNK_ROWS):
        chunk = slice(begin, begin + CHUNK_ROWS)
        valid = offsets[None, :] < lengths[chunk, None]
        index = torch.where(valid, starts[chunk, None] + offsets[None, :], 0)
        rows = value[index]
        rows[~valid] = 0
        out[chunk] = rows
    return out


def data_augmentation(self) -> None:
    """Drop-in for ``SequentialDataset.data_augmentation`` (same fields, dtypes and values)."""
    from recbole.data.interaction import Interaction
    from recbole.utils import FeatureType

    self.logger.debug("data_augmentation")
    self._aug_presets()
    self._check_field("uid_field", "time_field")
    self.sort(by=[self.uid_field, self.time_field], ascending=True)
    targets, starts, lengths = prefix_rows(self.inter_feat[self.uid_field].numpy(), self.config["MAX_ITEM_LIST_LENGTH"])
    new_data = self.inter_feat[targets]
    new_dict = {self.item_list_length_field: torch.tensor(lengths, dtype=torch.int64)}
    starts, lengths = torch.from_numpy(starts), torch.from_numpy(lengths)
    for field in self.inter_feat:
        if field == self.uid_field:
            continue
        list_field = getattr(self, f"{field}_list_field")
        list_len = self.field2seqlen[list_field]
        shape = (len(targets), list_len) if isinstance(list_len, int) else (len(targets),) + list_len
        if self.field2type[field] in (FeatureType.FLOAT, FeatureType.FLOAT_SEQ) \
                and field in self.config["numerical_features"]:
            shape += (2,)
        value = self.inter_feat[field]
        new_dict[list_field] = gather_prefixes(value, starts, lengths, torch.zeros(shape, dtype=value.dtype))
    new_data.update(Interaction(new_dict))
    self.inter_feat = new_data


def patch_sequential_augmentation() -> None:
    """Install :func:`data_augmentation` on RecBole's ``SequentialDataset`` (idempotent)."""
    from recbole.data.dataset import SequentialDataset

    if SequentialDataset.data_augmentation is not data_augmentation:
        SequentialDataset.recbole_data_augmentation = SequentialDataset.data_augmentation
        SequentialDataset.data_augmentation = data_augmentation
