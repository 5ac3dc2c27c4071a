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
    (["aux_losses=[{type: augmented_contrastive, short_length: -1}]"], "short_length must be >= 0"),
    (["aux_losses=[{type: augmented_contrastive, short_operations: []}]"], "short_operations must name at least one"),
    (["aux_losses=[{type: augmented_contrastive, insert_ratio: 2}]"], "insert_ratio must be in"),
    (["aux_losses=[{type: augmented_contrastive, hybrid_after_epoch: -3}]"], "hybrid_after_epoch must be >= 0"),
    (["aux_losses=[{type: augmented_contrastive, view: flat}]"], "view"),
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


def test_coserec_trains_on_windows_with_its_robust_augmentations(in_tmp):
    result = run(TINY_DATA, ["model=CoSeRec", "epochs=2", "hidden_size=16", "inner_size=32"])
    history = json.loads((result.run_dir / "history.json").read_text())
    assert len(history) == 2 and all(torch.isfinite(torch.tensor(list(e["train_loss"].values()))).all() for e in history)
    assert 0 <= result.test_result["ndcg@10"] <= 1


def test_coserec_neighbours_turn_hybrid_after_the_warm_up_epoch(in_tmp):
    """ItemCF-IUF neighbours from the training data, then, from the epoch after ``hybrid_after_epoch``
    on, mixed with the item embeddings' at the start of every epoch (the trainer calls the hook)."""
    from recbole_ext.models.item_similarity import embedding_neighbours, hybrid, itemcf_iuf_of_dataset

    model, _, _ = build(tiny_recbole_config(
        "CoSeRec", **SMALL, aux_losses="[{type: augmented_contrastive, operations: [substitute, insert], "
                                       "hybrid_after_epoch: 1}]"))
    loss = model.aux_losses[0]
    prefixes = build(tiny_recbole_config("SeqTransformer", **SMALL))[2][0]._dataset  # every training interaction
    offline = itemcf_iuf_of_dataset(prefixes, model.n_items)
    assert torch.equal(loss.neighbours, offline[0]) and (offline[0] > 0).sum() > 0.5 * model.n_items
    model.start_training_epoch(1)
    assert torch.equal(loss.neighbours, offline[0])  # still warming up
    model.start_training_epoch(2)
    expected = hybrid(offline, embedding_neighbours(model.item_embedding.weight.detach(), model.n_items))
    assert torch.equal(loss.neighbours, expected) and not torch.equal(expected, offline[0])


def test_the_trainer_starts_every_epoch_through_the_model(in_tmp, monkeypatch):
    from recbole_ext.models.seq_transformer import SeqTransformer

    seen = []
    monkeypatch.setattr(SeqTransformer, "start_training_epoch", lambda self, epoch: seen.append(epoch))
    run(TINY_DATA, ["model=CoSeRec", "epochs=3", "hidden_size=16", "inner_size=32"])
    assert seen == [0, 1, 2]


def test_sequence_views_compare_every_state_aligned_at_the_latest_item(in_tmp):
    config = tiny_recbole_config("CoSeRec", **SMALL, hidden_dropout_prob=0.0, attn_dropout_prob=0.0)
    model, _, (train_data, _, _) = build(config)
    model.eval()
    loss = model.aux_losses[0]
    batch = next(iter(train_data))
    lengths = batch[model.ITEM_SEQ_LEN]
    with torch.no_grad():
        view = loss.view_of(model, batch).view(len(batch), model.max_seq_length, -1)
        states = model.backbone.encode_positions(model, batch, None)[0]
    row = int(torch.argmin(lengths))
    n = int(lengths[row])
    assert torch.allclose(view[row, -n:], states[row, :n], atol=1e-6)
    assert (view[row, :-n] == 0).all()


def test_sequence_views_need_a_backbone_with_every_state(in_tmp):
    config = tiny_recbole_config("CoSeRec", **SMALL, backbone="bert4rec", loss_type="CE")
    with pytest.raises(ConfigError, match="view 'sequence' reads the states of every position.*Cloze") as error:
        build(config)
    assert "\n" not in str(error.value)
