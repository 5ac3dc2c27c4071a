"""Interaction filters of the papers' protocols, vectorised (ML-1M's 1M rows filter in well under a second).

All functions take and return a pandas DataFrame with ``user_id`` and ``item_id`` columns and
keep the row order (the order is the time order for sources without timestamps).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

USER, ITEM, RATING = "user_id", "item_id", "rating"
KCORE_KINDS = ("iterative", "single", "single_then_users")


@dataclass(frozen=True)
class FilterSpec:
    """What to drop, in this order: ratings below ``min_rating``, then the k-core on both sides.

    ``kcore``: ``iterative`` repeats until every remaining user has ``user_min`` and every item
    ``item_min`` interactions (RecBole's ``user/item_inter_num_interval`` loop, which drops the
    banned users and items of one round together); ``single`` counts once on the input and drops
    every interaction whose user or item is below its threshold (SASRec/TiSASRec ``data_partition``;
    specs/recdenoiser.md §3.1); ``single_then_users`` does that, then drops the users left with fewer
    than ``user_min`` interactions once more (HLLM's ``process_books.py``; specs/cape.md §3.3).
    """

    min_rating: float | None = None
    user_min: int = 0
    item_min: int = 0
    kcore: str = "iterative"

    def __post_init__(self):
        if self.kcore not in KCORE_KINDS:
            raise ValueError(f"kcore must be one of {', '.join(KCORE_KINDS)}, got {self.kcore!r}")

    def as_dict(self) -> dict:
        return asdict(self)

    def is_noop(self) -> bool:
        return self.min_rating is None and self.user_min <= 1 and self.item_min <= 1


def _counts(codes: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(codes, minlength=size)


def kcore_mask(users: np.ndarray, items: np.ndarray, user_min: int, item_min: int,
               iterative: bool = True) -> np.ndarray:
    """Boolean mask of the rows to keep; ``users``/``items`` are integer codes 0..n-1."""
    keep = np.ones(len(users), dtype=bool)
    if user_min <= 1 and item_min <= 1:
        return keep
    n_users = int(users.max()) + 1 if len(users) else 0
    n_items = int(items.max()) + 1 if len(items) else 0
    while True:
        user_count = _counts(users[keep], n_users)
        item_count = _counts(items[keep], n_items)
        banned = keep & ((user_count[users] < user_min) | (item_count[items] < item_min))
        if not banned.any():
            return keep
        keep &= ~banned
        if not iterative:
            return keep


def apply_filters(frame: pd.DataFrame, spec: FilterSpec) -> pd.DataFrame:
    """Rows of ``frame`` that survive ``spec`` (index reset, order kept)."""
    if spec.min_rating is not None:
        if RATING not in frame.columns:
            raise KeyError(RATING)
        frame = frame[frame[RATING].to_numpy(dtype=float) >= spec.min_rating]
    users = pd.factorize(frame[USER])[0]
    items = pd.factorize(frame[ITEM])[0]
    keep = kcore_mask(users, items, spec.user_min, spec.item_min, iterative=spec.kcore == "iterative")
    if spec.kcore == "single_then_users":
        keep &= _counts(users[keep], int(users.max()) + 1 if len(users) else 0)[users] >= spec.user_min
    return frame[keep].reset_index(drop=True)


def counts(frame: pd.DataFrame) -> dict:
    """Users, items, interactions, average sequence length and sparsity (real ids, no [PAD])."""
    users = int(frame[USER].nunique())
    items = int(frame[ITEM].nunique())
    inters = int(len(frame))
    return {
        "users": users, "items": items, "interactions": inters,
        "avg_length": round(inters / users, 4) if users else 0.0,
        "sparsity": round(1 - inters / (users * items), 6) if users and items else 1.0,
    }
