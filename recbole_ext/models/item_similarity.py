"""Item-item similarity for CoSeRec's substitute and insert augmentations (Liu et al., 2021, §3.2).

Each item gets one neighbour, its most similar other item, and a score in [0, 1]:

* offline, ItemCF-IUF from the training interactions: ``s(i, j) = Σ_{u ∋ i, j} 1 / log(1 + |I_u|)
  / √(N_i · N_j)``, with ``I_u`` the distinct training items of user u and ``N_i`` the users of i
  (co-occurrence damped for users with many items: "inverse user frequency"). Scores are min-max
  normalised over every co-occurring pair, as CoSeRec's code does. An item that shares no user
  with another has no neighbour (id 0, score 0): the augmentation then draws a random item.
* online, from the model's item embeddings: the largest dot product with another item, min-max
  normalised over all pairs of real items (self-pairs included, as the code's bounds are).
* hybrid (CoSeRec after its warm-up epochs): per item, the offline neighbour when its score is at
  least the online one's, else the online neighbour.

Everything is computed with sparse or chunked dense products: no per-item Python work.
"""
from __future__ import annotations

import math
import warnings

import torch

from recbole_ext.models.window_targets import training_history

ONLINE_CHUNK = 2048  # rows of the item-item product per step: [chunk, items] floats at a time


def _min_max(values: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return (values - low) / (high - low) if high > low else torch.zeros_like(values)


def itemcf_iuf(users: torch.Tensor, items: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(neighbour [n_items] long, score [n_items] float) from (user, item) training pairs."""
    keys = torch.unique(users.long() * n_items + items.long())
    users, items = keys // n_items, keys % n_items
    _, users = torch.unique(users, return_inverse=True)  # dense user rows
    n_users = int(users.max()) + 1 if len(users) else 0
    per_user = torch.bincount(users, minlength=n_users).double()
    weight = 1.0 / torch.log1p(per_user)
    ones = torch.ones(len(items), dtype=torch.float64)
    index = torch.stack([users, items])
    incidence = torch.sparse_coo_tensor(index, ones, (n_users, n_items), check_invariants=True).coalesce()
    weighted = torch.sparse_coo_tensor(index, weight[users], (n_users, n_items), check_invariants=True).coalesce()
    with warnings.catch_warnings():  # torch routes the product through its (beta) CSR kernels
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        co = torch.sparse.mm(incidence.t().coalesce(), weighted).coalesce()  # [items, items]: Σ_u w_u
    rows, columns = co.indices()
    values = co.values()
    other = rows != columns
    rows, columns, values = rows[other], columns[other], values[other]
    item_users = torch.bincount(items, minlength=n_items).double()
    values = values / torch.sqrt(item_users[rows] * item_users[columns])
    neighbour = torch.zeros(n_items, dtype=torch.long)
    score = torch.zeros(n_items, dtype=torch.float64)
    if len(values):
        best = torch.full((n_items,), -math.inf, dtype=torch.float64).scatter_reduce(0, rows, values, "amax")
        at_best = values == best[rows]
        # ties: the smallest item id, so the table does not depend on the order of the pairs
        first = torch.full((n_items,), n_items, dtype=torch.long).scatter_reduce(0, rows[at_best], columns[at_best], "amin")
        found = first < n_items
        neighbour[found] = first[found]
        score[found] = _min_max(best[found], float(values.min()), float(values.max()))
    return neighbour, score.float()


def itemcf_iuf_of_dataset(dataset, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ItemCF-IUF neighbours from RecBole's (prefix) training dataset."""
    return itemcf_iuf(*training_history(dataset), n_items)


@torch.no_grad()
def embedding_neighbours(weight: torch.Tensor, n_items: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(neighbour, score) [n_items] by dot products of the real items' embeddings (rows 1..n−1)."""
    vectors = weight[1:n_items].float()
    neighbour = torch.zeros(n_items, dtype=torch.long, device=weight.device)
    best = torch.zeros(n_items, device=weight.device)
    low, high = math.inf, -math.inf
    for start in range(0, len(vectors), ONLINE_CHUNK):
        products = vectors[start:start + ONLINE_CHUNK] @ vectors.T
        low, high = min(low, float(products.min())), max(high, float(products.max()))
        own = torch.arange(start, start + len(products), device=weight.device)
        products[torch.arange(len(products), device=weight.device), own] = -math.inf  # not itself
        values, columns = products.max(1)
        best[own + 1], neighbour[own + 1] = values, columns + 1
    score = _min_max(best, low, high)
    score[0] = 0.0
    return neighbour, score


def hybrid(offline: tuple[torch.Tensor, torch.Tensor], online: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Per item, the neighbour of whichever table scores higher (offline on ties): CoSeRec's ensemble."""
    (offline_items, offline_scores), (online_items, online_scores) = offline, online
    offline_wins = offline_scores.to(online_scores.device) >= online_scores
    return torch.where(offline_wins, offline_items.to(online_items.device), online_items)
