"""SSE-PT backbone (models/backbone_ssept.py): user embeddings in the input and the scores, SSE swaps."""
from __future__ import annotations

import json
import math

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.models.window_targets import next_item_targets
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config

SMALL = {"hidden_size": 24, "inner_size": 24, "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0}
SMALL_BACKBONE = {"type": "ssept", "user_size": 8, "user_replace_prob": 0.5, "item_replace_prob": 0.3}


@pytest.mark.parametrize("model, overrides", [
    ("SSEPT", []),
    ("SSEPT", ["training_samples=windows"]),
    ("DenoiserSSEPT", ["training_samples=windows"]),
    ("SSEPT", ["loss_type=CE"]),
])
def test_ssept_trains_and_evaluates(in_tmp, model, overrides):
    result = run(TINY_DATA, [f"model={model}", "epochs=2", "hidden_size=24", "inner_size=24",
                             "backbone={type: ssept, user_size: 8}", *overrides])
    history = json.loads((result.run_dir / "history.json").read_text())
    assert len(history) == 2 and all(math.isfinite(v) for e in history for v in e["train_loss"].values())
    assert 0 <= result.test_result["ndcg@10"] <= 1


def test_a_candidate_scores_the_state_against_its_item_and_the_user(in_tmp):
    """s(u, j) = h · [e_j; e_u] with h the state at the last real position; the user term travels as
    the representation's last column, so sampled and full-sort scores need no user id."""
    model, _, (train_data, _, _) = build(tiny_recbole_config("SSEPT", **SMALL, backbone=SMALL_BACKBONE))
    model.eval()
    batch = next(iter(train_data))
    with torch.no_grad():
        seq, users = batch[model.ITEM_SEQ], batch[model.USER_ID]
        state = model.encode(seq, causal=True, users=users).at(batch[model.ITEM_SEQ_LEN] - 1)  # [B, D]
        assert state.shape[-1] == 24 and model.item_embedding.weight.shape[-1] == 16
        candidates = torch.cat([model.item_embedding.weight[: model.n_items][None].expand(len(batch), -1, -1),
                                model.backbone.user_embedding(users)[:, None, :].expand(-1, model.n_items, -1)], -1)
        expected = (state[:, None, :] * candidates).sum(-1)
        assert torch.allclose(model.full_sort_predict(batch), expected, atol=1e-5)
        items = batch[model.POS_ITEM_ID]
        assert torch.allclose(model.predict(batch), expected.gather(1, items[:, None]).squeeze(1), atol=1e-5)


def test_the_user_embedding_changes_the_ranking_not_only_a_shift(in_tmp):
    model, _, (train_data, _, _) = build(tiny_recbole_config("SSEPT", **SMALL, backbone=SMALL_BACKBONE))
    model.eval()
    batch = next(iter(train_data))
    with torch.no_grad():
        scores = model.full_sort_predict(batch)
        batch[model.USER_ID] = batch[model.USER_ID].roll(1)
        other = model.full_sort_predict(batch)
    shift = (other - scores)[:, 1:]
    assert not torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-4)


def window_batch(model, train_data):
    batch = next(iter(train_data))
    targets = next_item_targets(batch[model.ITEM_SEQ], batch[model.ITEM_SEQ_LEN], batch[model.POS_ITEM_ID])
    return batch, targets


def test_sse_swaps_real_ids_only_and_keeps_the_targets_consistent(in_tmp):
    """SSE-PT's sampler: a swapped position gets a random item, which becomes the previous
    position's target, and a random target of its own; users are swapped whole; padding stays."""
    model, _, (train_data, _, _) = build(tiny_recbole_config("SSEPT", **SMALL, backbone=SMALL_BACKBONE,
                                                             training_samples="windows"))
    batch, targets = window_batch(model, train_data)
    seq, lengths = batch[model.ITEM_SEQ], batch[model.ITEM_SEQ_LEN]
    torch.manual_seed(0)
    view, swapped_targets = model.backbone.training_view(model, batch, targets)
    new_seq, users = view[model.ITEM_SEQ], view[model.USER_ID]
    real = seq > 0
    changed = new_seq != seq
    assert not changed[~real].any() and 0.15 < changed[real].float().mean() < 0.45  # p = 0.3, some draws repeat
    assert 0.3 < (users != batch[model.USER_ID]).float().mean() < 0.7 and (users >= 1).all()
    assert ((new_seq[real] >= 1) & (new_seq[real] < model.n_items)).all()
    # where the next position was not swapped and this one was not either, the target is the original
    next_swapped = torch.zeros_like(changed)
    next_swapped[:, :-1] = changed[:, 1:]
    # (a swap may draw the same item back: it then looks unchanged, but its target is a random one)
    kept = real & ~changed & ~next_swapped
    assert (swapped_targets[kept] != targets[kept]).sum() <= 2
    # the target before a swapped position is the swapped-in item
    before = next_swapped & real & ~changed
    assert (swapped_targets[before] != new_seq[:, 1:][before[:, :-1]]).sum() <= 2
    assert (swapped_targets[changed] != targets[changed]).float().mean() > 0.95
    assert torch.equal(swapped_targets > 0, targets > 0)
    # the encoder sees the view, the negatives the real user (SSE-PT draws them from the real history)
    assert torch.equal(view[model.ITEM_SEQ_LEN], lengths)


def test_sse_draws_the_same_swaps_for_a_trimmed_batch(in_tmp):
    model, _, (train_data, _, _) = build(tiny_recbole_config("SSEPT", **SMALL, backbone=SMALL_BACKBONE,
                                                             training_samples="windows"))
    batch, targets = window_batch(model, train_data)
    width = int(batch[model.ITEM_SEQ_LEN].max())
    trimmed = {model.ITEM_SEQ: batch[model.ITEM_SEQ][:, :width], model.ITEM_SEQ_LEN: batch[model.ITEM_SEQ_LEN],
               model.USER_ID: batch[model.USER_ID], model.POS_ITEM_ID: batch[model.POS_ITEM_ID]}
    torch.manual_seed(5)
    full_view, full_targets = model.backbone.training_view(model, batch, targets)
    torch.manual_seed(5)
    trimmed_view, trimmed_targets = model.backbone.training_view(model, trimmed, targets[:, :width])
    assert torch.equal(full_view[model.ITEM_SEQ][:, :width], trimmed_view[model.ITEM_SEQ])
    assert torch.equal(full_targets[:, :width], trimmed_targets)
    assert torch.equal(full_view[model.USER_ID], trimmed_view[model.USER_ID])


def test_prefix_rows_swap_the_target_when_their_last_item_is_swapped(in_tmp):
    model, _, (train_data, _, _) = build(tiny_recbole_config(
        "SSEPT", **SMALL, backbone={**SMALL_BACKBONE, "item_replace_prob": 0.5}))
    batch = next(iter(train_data))
    torch.manual_seed(1)
    view, targets = model.backbone.training_view(model, batch, batch[model.POS_ITEM_ID])
    rows = torch.arange(len(batch))
    last = batch[model.ITEM_SEQ_LEN] - 1
    last_swapped = view[model.ITEM_SEQ][rows, last] != batch[model.ITEM_SEQ][rows, last]
    assert last_swapped.sum() > 0.3 * len(batch) and (~last_swapped).sum() > 0.3 * len(batch)
    changed = targets != batch[model.POS_ITEM_ID]
    # a swap may draw the same item back: it looks unchanged, but its target is a random one
    assert changed[~last_swapped].sum() <= 2 and changed[last_swapped].float().mean() > 0.95


def test_the_user_size_defaults_to_half_the_hidden_size(in_tmp):
    model, _, _ = build(tiny_recbole_config("SSEPT", **{**SMALL, "hidden_size": 20}))
    assert model.backbone.user_embedding.weight.shape[1] == 10 == model.item_embedding.weight.shape[1]


def test_without_sse_the_view_is_the_batch(in_tmp):
    model, _, (train_data, _, _) = build(tiny_recbole_config(
        "SSEPT", **SMALL, backbone={"type": "ssept", "user_size": 8, "user_replace_prob": 0.0, "item_replace_prob": 0.0},
        training_samples="windows"))
    batch, targets = window_batch(model, train_data)
    view, same_targets = model.backbone.training_view(model, batch, targets)
    assert torch.equal(view[model.ITEM_SEQ], batch[model.ITEM_SEQ]) and torch.equal(same_targets, targets)
    assert torch.equal(view[model.USER_ID], batch[model.USER_ID])


@pytest.mark.parametrize("overrides, key, needle", [
    (["backbone={type: ssept, user_size: 64}", "hidden_size=64"], "backbone", "user_size 64 leaves no item or no user"),
    (["hidden_size=1", "n_heads=1"], "backbone", "user_size 0 leaves no item or no user"),
    (["backbone={type: ssept, item_replace_prob: 1.0}"], "backbone", r"item_replace_prob must be in \[0, 1\)"),
    (["aux_losses=[{type: same_target_contrastive}]"], "aux_losses", "compares user representations"),
    (["loss_type=InfoNCE"], "loss_type", "InfoNCE trains next-item backbones"),
])
def test_what_ssept_cannot_use_is_a_one_line_error_naming_the_key(overrides, key, needle):
    with pytest.raises(ConfigError, match=needle) as error:
        resolve(TINY_DATA, ["model=SSEPT", *overrides])
    assert "\n" not in str(error.value) and key in str(error.value)
