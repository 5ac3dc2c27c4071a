"""The data side of window training (``training_samples: windows``; models/window_targets.py).

RecBole's sequential dataset holds one training row per interaction: the items before it (at most
``MAX_ITEM_LIST_LENGTH``) and it as the target, in time order per user. A user's last row is their
latest window with its last target, and the model derives every other target from it, so window
training needs nothing but those rows: :func:`last_window_loader` keeps them.

Only the training loader changes. Its negative sampler is kept, so validation and test draw their
negatives (``uni100``, ``pop100``) exactly as under prefix training, and the model is built from
the full training dataset (which its window negatives exclude: every item a user trained on).
"""
from __future__ import annotations

import torch


def last_row_per_user(users: torch.Tensor) -> torch.Tensor:
    """Sorted indices of each user's last row; rows of one user are in time order."""
    rows = torch.arange(users.numel())
    last = torch.full((int(users.max()) + 1 if users.numel() else 0,), -1, dtype=torch.long)
    last.scatter_reduce_(0, users.long(), rows, reduce="amax")
    return last[last >= 0].sort().values


def last_window_loader(config, train_data):
    """A training loader like ``train_data`` (RecBole's) over each user's last row only."""
    from recbole.data.utils import get_dataloader

    dataset = train_data._dataset
    windows = dataset.copy(dataset.inter_feat[last_row_per_user(dataset.inter_feat[dataset.uid_field])])
    return get_dataloader(config, "train")(config, windows, train_data._sampler, shuffle=config["shuffle"])
