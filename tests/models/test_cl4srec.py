"""CL4SRec: SASRec + ``augmented_contrastive`` (crop / mask / reorder views, InfoNCE)."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config

SMALL = {"hidden_size": 16, "inner_size": 32, "MAX_ITEM_LIST_LENGTH": 10, "user_inter_num_interval": "'[0,25]'"}


def test_preset_is_sasrec_with_the_augmented_contrastive_term():
    values = resolve(TINY_DATA, ["model=CL4SRec"]).values
    assert values["attention"] == "softmax" and values["backbone"] == "sasrec"
    assert values["aux_losses"] == [{"type": "augmented_contrastive", "weight": 0.1, "crop_ratio": 0.2,
                                     "mask_ratio": 0.7, "reorder_ratio": 0.2, "temperature": 1.0}]


@pytest.mark.parametrize("operations, rows", [("[crop, mask, reorder]", 1), ("[crop, reorder]", 0)])
def test_a_mask_row_exists_only_when_views_mask_and_is_never_scored(in_tmp, operations, rows):
    config = tiny_recbole_config("CL4SRec", **SMALL, aux_losses=f"[{{type: augmented_contrastive, operations: {operations}}}]")
    model, _, (train_data, _, test_data) = build(config)
    assert model.item_embedding.num_embeddings == model.n_items + rows
    batch = next(iter(train_data))
    model.train()
    losses = dict(zip(model.loss_names, model.calculate_loss(batch)))
    assert set(losses) == {"main", "augmented_contrastive"} and all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    if rows:  # the views' [MASK] row learns
        assert model.item_embedding.weight.grad[model.n_items].abs().sum() > 0
    model.eval()
    with torch.no_grad():
        scores = model.full_sort_predict(next(iter(test_data))[0])
    assert scores.size(1) == model.n_items


@pytest.mark.parametrize("overrides, needle", [
    (["aux_losses=[{type: augmented_contrastive, crop_ratio: 1.5}]"], "crop_ratio"),
    (["aux_losses=[{type: augmented_contrastive, crop_raito: 0.5}]"], "crop_raito"),
    (["aux_losses=[{type: augmented_contrastive, operations: [crop, shuffle]}]"], "operations"),
    (["aux_losses=[{type: augmented_contrastive, operations: []}]"], "operations"),
    (["aux_losses=[{type: augmented_contrastive, operations: [crop, crop]}]"], "operations must not repeat"),
    (["aux_losses=[{type: augmented_contrastive, temperature: 0}]"], "temperature"),
])
def test_bad_options_are_one_line_errors_naming_the_option(overrides, needle):
    with pytest.raises(ConfigError, match=needle) as error:
        resolve(TINY_DATA, ["model=CL4SRec", *overrides])
    assert "\n" not in str(error.value)


def test_backbones_that_read_more_than_item_ids_are_refused(in_tmp):
    config = tiny_recbole_config("CL4SRec", **SMALL, backbone="{type: tisasrec, missing_timestamps: positions}",
                                 attention="time_interval")
    with pytest.raises(ConfigError, match="augmented_contrastive.*TimeIntervalNextItem"):
        build(config)


def test_one_epoch_trains_and_logs_each_term(in_tmp):
    result = run(TINY_DATA, ["model=CL4SRec", "epochs=1", *(f"{k}={v}" for k, v in SMALL.items())])
    history = json.loads((result.run_dir / "history.json").read_text())
    assert set(history[0]["train_loss"]) == {"main", "augmented_contrastive", "total"}
    assert all(value == value for value in history[0]["train_loss"].values())  # no NaN
    assert result.test_result["ndcg@10"] >= 0
