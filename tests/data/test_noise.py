"""Noise transform for the robustness experiment: requested fraction, real order kept, held-out items untouched."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from recbole_ext.data.noise import inject_noise, main

COLUMNS = {"user": "user_id:token", "item": "item_id:token", "time": "timestamp:float"}


def interactions(seed=0, users=30):
    rng = np.random.default_rng(seed)
    rows = []
    for user in range(users):
        length = int(rng.integers(3, 40))
        times = np.sort(rng.integers(0, 50, size=length)).astype(float)  # many ties
        for position, time in enumerate(times):
            rows.append({"user_id:token": f"u{user}", "item_id:token": f"i{rng.integers(200)}",
                         "rating:float": str(position), "timestamp:float": time})
    return pd.DataFrame(rows).sample(frac=1.0, random_state=seed)  # file order is not time order


def by_user(frame):
    ordered = frame.sort_values(["user_id:token", "timestamp:float"], kind="stable")  # as RecBole sorts
    return {user: group for user, group in ordered.groupby("user_id:token")}


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.25])
def test_insert_adds_the_requested_fraction_and_keeps_real_items_in_order(ratio):
    original = interactions()
    noisy = inject_noise(original, ratio, user=COLUMNS["user"], item=COLUMNS["item"], time=COLUMNS["time"], seed=1,
                         mark="noise")
    before, after = by_user(original), by_user(noisy)
    total_train = total_added = 0
    for user, history in before.items():
        train = len(history) - 2
        added = len(after[user]) - len(history)
        assert added == round(ratio * train)
        total_train, total_added = total_train + train, total_added + added
        # The real rows (their rating column tags their position) appear in the same order in RecBole's order.
        tags = list(history["rating:float"])
        noisy_rows = after[user]
        is_real = ~noisy_rows["noise"]
        real_rows = noisy_rows[is_real].drop(columns="noise")
        assert list(real_rows["rating:float"]) == tags
        assert real_rows.apply(tuple, axis=1).tolist() == history.apply(tuple, axis=1).tolist()
        # Held-out (last two) interactions stay last.
        assert not noisy_rows["noise"].tail(2).any()
        held_out = set(history["item_id:token"].tail(2))
        assert not set(noisy_rows[~is_real]["item_id:token"]) & held_out
    assert total_added == pytest.approx(ratio * total_train, abs=len(before) / 2)


def test_replace_swaps_the_requested_fraction_in_place():
    original = interactions(seed=2)
    noisy = inject_noise(original, 0.2, user=COLUMNS["user"], item=COLUMNS["item"], time=COLUMNS["time"],
                         mode="replace", seed=3, mark="noise")
    before, after = by_user(original), by_user(noisy)
    total_changed = 0
    for user, history in before.items():
        mine = after[user]
        assert len(mine) == len(history)
        assert list(mine["timestamp:float"]) == list(history["timestamp:float"])
        changed = mine["item_id:token"].to_numpy() != history["item_id:token"].to_numpy()
        assert list(mine["rating:float"]) == list(history["rating:float"])  # other columns stay
        # A drawn item may equal the one it replaces, so at most the requested count differs.
        assert mine["noise"].sum() == round(0.2 * (len(history) - 2)) and not mine["noise"].tail(2).any()
        assert not (changed & ~mine["noise"].to_numpy()).any()
        total_changed += int(changed.sum())
    assert total_changed > 0


def test_cli_writes_a_new_atomic_dataset(tmp_path):
    source = tmp_path / "toy"
    source.mkdir()
    interactions(seed=4).to_csv(source / "toy.inter", sep="\t", index=False)
    (source / "toy.item").write_text("item_id:token\ni1\n")
    main(["--data-path", str(tmp_path), "--dataset", "toy", "--ratio", "0.1", "--seed", "5"])
    written = pd.read_csv(tmp_path / "toy-noise10" / "toy-noise10.inter", sep="\t", dtype=str)
    assert list(written.columns) == list(interactions().columns)
    assert (tmp_path / "toy-noise10" / "toy-noise10.item").read_text() == "item_id:token\ni1\n"
    with pytest.raises(ValueError, match="ratio"):
        inject_noise(interactions(), 1.5, user=COLUMNS["user"], item=COLUMNS["item"], time=COLUMNS["time"])
