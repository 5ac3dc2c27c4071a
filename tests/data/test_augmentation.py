"""Our prefix augmentation gives RecBole's rows exactly: every field, dtype and value, with
histories longer and shorter than MAX_ITEM_LIST_LENGTH, float and numerical-feature fields."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from recbole.data import create_dataset
from recbole.data.dataset import SequentialDataset

from recbole_ext.data import augmentation
from recbole_ext.data.augmentation import data_augmentation, prefix_rows

from ..conftest import tiny_recbole_config


def recbole_prefix_rows(uids, max_length):
    """RecBole 1.2.1's loop (``SequentialDataset.data_augmentation``), for the indices alone."""
    last, start, rows = None, 0, []
    for i, uid in enumerate(uids):
        if uid != last:
            last, start = uid, i
            continue
        if i - start > max_length:
            start += 1
        rows.append((i, start, i - start))
    return [list(column) for column in zip(*rows)] if rows else [[], [], []]


@pytest.mark.parametrize("max_length", [1, 3, 50])
def test_prefix_rows_are_recboles(max_length):
    uids = np.sort(np.random.default_rng(max_length).integers(0, 40, 1500))
    uids = np.concatenate([[-1], uids, [99]])  # one-interaction users first and last: no rows
    assert [list(column) for column in prefix_rows(uids, max_length)] == recbole_prefix_rows(uids, max_length)


def test_the_patch_is_installed():
    assert SequentialDataset.data_augmentation is data_augmentation


@pytest.mark.parametrize("overrides", [{"MAX_ITEM_LIST_LENGTH": 5},
                                       {"MAX_ITEM_LIST_LENGTH": 30, "numerical_features": ["rating"],
                                        "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp"]}}])
def test_the_dataset_equals_recboles(in_tmp, monkeypatch, overrides):
    config = tiny_recbole_config(**overrides)

    def augmented():
        dataset = create_dataset(config)
        dataset.build()  # splitting augments first (SequentialDataset._change_feat_format)
        return dataset.inter_feat

    ours = augmented()
    monkeypatch.setattr(augmentation, "CHUNK_ROWS", 97)  # several chunks, the last one short
    chunked = augmented()
    monkeypatch.setattr(SequentialDataset, "data_augmentation", SequentialDataset.recbole_data_augmentation)
    theirs = augmented()
    assert sorted(ours.columns) == sorted(theirs.columns) and len(ours) == len(theirs) > 0
    for field in theirs.columns:
        for mine in (ours, chunked):
            assert mine[field].dtype == theirs[field].dtype and torch.equal(mine[field], theirs[field]), field
    assert ours["item_length"].max() == config["MAX_ITEM_LIST_LENGTH"]  # some histories were cut
    if config["numerical_features"]:
        assert ours["rating_list"].shape == (len(ours), 30, 2)  # RecBole's (value, 1) pairs per position
