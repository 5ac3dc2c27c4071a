"""Filters against straightforward reference implementations (RecBole's loop; TiSASRec's single pass)."""
from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recbole_ext.data.filters import FilterSpec, apply_filters, counts


def recbole_kcore(rows, user_min, item_min):
    """RecBole 1.2.1 Dataset._filter_by_inter_num, restated on a list of (user, item) rows."""
    rows = list(rows)
    while True:
        users, items = Counter(u for u, _ in rows), Counter(i for _, i in rows)
        ban_u = {u for u, n in users.items() if n < user_min}
        ban_i = {i for i, n in items.items() if n < item_min}
        if not ban_u and not ban_i:
            return rows
        rows = [(u, i) for u, i in rows if u not in ban_u and i not in ban_i]


def single_pass(rows, user_min, item_min):
    users, items = Counter(u for u, _ in rows), Counter(i for _, i in rows)
    return [(u, i) for u, i in rows if users[u] >= user_min and items[i] >= item_min]


ROWS = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)), max_size=120)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, user_min=st.integers(0, 6), item_min=st.integers(0, 6))
def test_iterative_and_single_pass_match_the_references(rows, user_min, item_min):
    frame = pd.DataFrame(rows, columns=["user_id", "item_id"], dtype=object)
    iterative = apply_filters(frame, FilterSpec(user_min=user_min, item_min=item_min))
    assert list(map(tuple, iterative.to_numpy().tolist())) == recbole_kcore(rows, user_min, item_min)
    single = apply_filters(frame, FilterSpec(user_min=user_min, item_min=item_min, kcore="single"))
    assert list(map(tuple, single.to_numpy().tolist())) == single_pass(rows, user_min, item_min)


def hllm_books(rows, user_min, item_min):
    """HLLM's process_books.py: both counts once on the raw rows, then users counted again."""
    kept = single_pass(rows, user_min, item_min)
    users = Counter(u for u, _ in kept)
    return [(u, i) for u, i in kept if users[u] >= user_min]


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, user_min=st.integers(0, 6), item_min=st.integers(0, 6))
def test_single_then_users_matches_hllm(rows, user_min, item_min):
    frame = pd.DataFrame(rows, columns=["user_id", "item_id"], dtype=object)
    kept = apply_filters(frame, FilterSpec(user_min=user_min, item_min=item_min, kcore="single_then_users"))
    assert list(map(tuple, kept.to_numpy().tolist())) == hllm_books(rows, user_min, item_min)


def test_single_then_users_drops_users_the_item_filter_left_short():
    # user 1 has 3 ratings, but one is of item "rare" (1 rating < 2): single keeps 2 of user 1's rows,
    # single_then_users then drops user 1 (2 < 3); items are not counted again.
    rows = [(1, "a"), (1, "b"), (1, "rare")] + [(u, x) for u in (2, 3) for x in ("a", "b", "c")]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id"])
    single = apply_filters(frame, FilterSpec(user_min=3, item_min=2, kcore="single"))
    hllm = apply_filters(frame, FilterSpec(user_min=3, item_min=2, kcore="single_then_users"))
    assert 1 in set(single["user_id"]) and set(hllm["user_id"]) == {2, 3} and len(hllm) == 6
    with pytest.raises(ValueError, match="kcore must be one of iterative, single, single_then_users"):
        FilterSpec(kcore="twice")


def test_iterative_differs_from_single_pass():
    # item b has 5 ratings, but user 2's removal (2 ratings < 3) drops it to 4: only the loop sees that.
    rows = [(1, "a"), (1, "b"), (1, "c"), (2, "b"), (2, "d")] + [(u, "b") for u in (3, 4, 5)] + \
           [(u, x) for u in (3, 4, 5) for x in ("a", "c")] + [(1, "a")]
    frame = pd.DataFrame(rows, columns=["user_id", "item_id"])
    single = apply_filters(frame, FilterSpec(user_min=3, item_min=5, kcore="single"))
    iterative = apply_filters(frame, FilterSpec(user_min=3, item_min=5))
    assert "b" in set(single["item_id"]) and len(iterative) < len(single)


def test_rating_threshold_then_per_side_thresholds():
    frame = pd.DataFrame({"user_id": [1, 1, 1, 2, 2, 2], "item_id": [1, 2, 3, 1, 2, 3],
                          "rating": [5, 2, 3, 3, 4, 1]})
    kept = apply_filters(frame, FilterSpec(min_rating=3))
    assert kept["rating"].tolist() == [5, 3, 3, 4]
    assert apply_filters(frame, FilterSpec(min_rating=3, user_min=3)).empty
    assert apply_filters(frame, FilterSpec(min_rating=3, item_min=2))["item_id"].tolist() == [1, 1]
    with pytest.raises(KeyError):
        apply_filters(frame.drop(columns="rating"), FilterSpec(min_rating=3))


def test_counts():
    frame = pd.DataFrame({"user_id": [1, 1, 2], "item_id": [1, 2, 1]})
    assert counts(frame) == {"users": 2, "items": 2, "interactions": 3, "avg_length": 1.5, "sparsity": 0.25}
