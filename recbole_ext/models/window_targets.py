"""Window training: every position of a user's latest window is a next-item target.

RecBole trains sequential models on *prefixes*: the dataset holds one row per training interaction
(the items before it, then it as the target) and the loss reads the last real position of each row.
SASRec's own code (Kang & McAuley 2018, §3.5), TiSASRec's and, through them, Rec-Denoiser's
(Chen et al. 2022, Eq. 4 sums the BCE over every position t) train on *windows* instead: an epoch
holds one row per user, their latest training items (up to ``L = MAX_ITEM_LIST_LENGTH`` as input),
and the state at position t predicts the item at t + 1; the last position predicts the latest one.

``training_samples: windows`` selects that scheme. The data side keeps each user's last prefix row
(``data/windows.py``): its sequence is the window and its target the window's last target, so
:func:`next_item_targets` recovers every target from the row alone. With causal attention the state
at t reads only the items up to t, so each window position is exactly the prefix row that ends
there for a user with at most ``L + 1`` training items (``tests/models/test_window_training.py``):
one pass trains what ``L`` prefix rows would. Longer histories train on their latest window only,
as in SASRec's code (their older items take no part). An epoch is then ``#users`` rows rather
than ``#interactions``, about 160 times fewer on ML-1M, which is why the TiSASRec-protocol tables
(Rec-Denoiser's) finish on a CPU.

Pairwise losses (BCE, BPR) need a negative per position: :class:`HistoryExcludingNegatives` draws
them uniformly from the items the user never trained on, as SASRec's ``random_neq`` does and as
RecBole's training sampler does for its one negative per row.

The cloze backbone (BERT4Rec) trains on windows too, as BERT4Rec's code does (Sun et al. 2019
mask whole user sequences): the row's target is appended to its window and each real item is
replaced by [MASK] with probability ``mask_ratio`` in the forward pass (``Cloze.masked_window``),
so every masked position of the user's latest sequence is a target, instead of RecBole's masks
over each prefix row.

Prefixes stay the default: FEARec, EulerFormer, LinRec and CAPE were trained with RecBole.
"""
from __future__ import annotations

import torch
from torch import nn

# A user who trained on (nearly) every item could make redrawing loop for ever; after this many
# rounds a colliding draw is kept. Each round redraws only the colliding positions.
MAX_REDRAWS = 100


def next_item_targets(item_seq: torch.Tensor, lengths: torch.Tensor, last_target: torch.Tensor) -> torch.Tensor:
    """[B, L] left-aligned windows, [B] lengths and [B] targets of their last positions → [B, L]
    target of every position: the item at t + 1, ``last_target`` at ``length − 1``, 0 at padding."""
    targets = torch.zeros_like(item_seq)
    targets[:, :-1] = item_seq[:, 1:]
    targets[torch.arange(item_seq.size(0), device=item_seq.device), lengths - 1] = last_target
    return targets


def training_history(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(users, items) of every training interaction, from RecBole's (prefix) training dataset: every
    row's target, plus each row's first item, which covers the one item of a user that is never a
    target (their first). Pairs may repeat."""
    features = dataset.inter_feat
    users = features[dataset.uid_field]
    first_items = features[dataset.item_id_list_field][:, 0]
    real = first_items > 0
    return torch.cat([users, users[real]]), torch.cat([features[dataset.iid_field], first_items[real]])


class HistoryExcludingNegatives(nn.Module):
    """Uniform negatives from items 1..n_items−1 that the user did not interact with in training.

    The (user, item) pairs are one sorted tensor of ``user · n_items + item`` keys, so membership is
    a vectorised binary search (``torch.searchsorted``); no per-user Python work per batch.
    """

    def __init__(self, users: torch.Tensor, items: torch.Tensor, n_items: int):
        super().__init__()
        self.n_items = n_items
        # Not persistent: it is data, rebuilt from the dataset at every build, not a weight to save.
        self.register_buffer("history_keys", torch.unique(users.long() * n_items + items.long()), persistent=False)

    @classmethod
    def from_training_rows(cls, dataset, n_items: int) -> "HistoryExcludingNegatives":
        """From RecBole's (prefix) training dataset (``training_history``)."""
        return cls(*training_history(dataset), n_items)

    def contains(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Whether each (user, item) pair is in the training history."""
        keys = self.history_keys
        if keys.numel() == 0:
            return torch.zeros_like(items, dtype=torch.bool)
        queries = users.long() * self.n_items + items.long()
        found = torch.searchsorted(keys, queries).clamp(max=keys.numel() - 1)
        return keys[found] == queries

    def sample(self, users: torch.Tensor) -> torch.Tensor:
        """One negative item per entry of ``users`` (any shape)."""
        negatives = torch.randint(1, self.n_items, users.shape, device=users.device)
        for _ in range(MAX_REDRAWS):
            taken = self.contains(users, negatives)
            if not taken.any():
                break
            negatives = torch.where(taken, torch.randint(1, self.n_items, users.shape, device=users.device), negatives)
        return negatives
