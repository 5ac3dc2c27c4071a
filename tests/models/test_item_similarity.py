"""CoSeRec's item neighbours (models/item_similarity.py) against direct per-item computations."""
from __future__ import annotations

import math

import pytest
import torch

from recbole_ext.models import item_similarity
from recbole_ext.models.item_similarity import embedding_neighbours, hybrid, itemcf_iuf


def brute_itemcf_iuf(pairs: list[tuple[int, int]], n_items: int):
    """The formula item by item: Σ_u 1/log(1+|I_u|) over users with both items, / √(N_i N_j)."""
    history: dict[int, set[int]] = {}
    for user, item in pairs:
        history.setdefault(user, set()).add(item)
    users_of = {i: {u for u, items in history.items() if i in items} for i in range(n_items)}
    scores = {}
    for i in range(n_items):
        for j in range(n_items):
            common = users_of[i] & users_of[j]
            if i != j and common:
                scores[i, j] = sum(1 / math.log(1 + len(history[u])) for u in common) / math.sqrt(
                    len(users_of[i]) * len(users_of[j]))
    low, high = min(scores.values()), max(scores.values())
    neighbour, score = [0] * n_items, [0.0] * n_items
    for i in range(n_items):
        mine = {j: v for (a, j), v in scores.items() if a == i}
        if mine:
            best = max(mine.values())
            neighbour[i] = min(j for j, v in mine.items() if v == best)
            score[i] = (best - low) / (high - low)
    return neighbour, score


def test_itemcf_iuf_matches_the_formula_item_by_item():
    generator = torch.Generator().manual_seed(0)
    users = torch.randint(0, 30, (200,), generator=generator)
    items = torch.randint(1, 25, (200,), generator=generator)  # item 0 (padding) and some ids never occur
    pairs = list(zip(users.tolist(), items.tolist())) + [(3, 7), (3, 7)]  # repeats count once
    neighbour, score = itemcf_iuf(torch.tensor([u for u, _ in pairs]), torch.tensor([i for _, i in pairs]), 27)
    expected_neighbour, expected_score = brute_itemcf_iuf(pairs, 27)
    assert neighbour.tolist() == expected_neighbour
    assert score.tolist() == pytest.approx(expected_score, abs=1e-6)
    assert neighbour[0] == 0 and neighbour[26] == 0  # no user: no neighbour


@pytest.mark.parametrize("chunk", [3, 2048])
def test_embedding_neighbours_are_the_largest_dot_products_with_other_items(monkeypatch, chunk):
    monkeypatch.setattr(item_similarity, "ONLINE_CHUNK", chunk)
    weight = torch.randn(12, 5, generator=torch.Generator().manual_seed(1))  # row 0 padding, 11 the [MASK]
    neighbour, score = embedding_neighbours(weight, n_items=11)
    products = weight[1:11] @ weight[1:11].T
    low, high = float(products.min()), float(products.max())
    products.fill_diagonal_(-math.inf)
    assert neighbour[1:].tolist() == (products.argmax(1) + 1).tolist()
    assert torch.allclose(score[1:], (products.max(1).values - low) / (high - low))
    assert neighbour[0] == 0 and score[0] == 0


def test_hybrid_takes_the_neighbour_with_the_higher_score():
    offline = (torch.tensor([0, 5, 0, 7]), torch.tensor([0.0, 0.9, 0.0, 0.2]))
    online = (torch.tensor([0, 6, 8, 9]), torch.tensor([0.0, 0.5, 0.4, 0.2]))
    assert hybrid(offline, online).tolist() == [0, 5, 8, 7]  # ties keep the offline neighbour
