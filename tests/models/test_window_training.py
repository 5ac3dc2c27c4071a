"""Window training (``training_samples: windows``): every position of each user's latest window is
a next-item target (models/window_targets.py, data/windows.py)."""
from __future__ import annotations

import json

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.models.backbones import append_after_history
from recbole_ext.models.window_targets import HistoryExcludingNegatives, next_item_targets
from recbole_ext.runner import build, run

from ..conftest import TINY_DATA, tiny_recbole_config
from .test_backbone_core import GENRES

SMALL = {"hidden_size": 16, "inner_size": 32, "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0}


def test_targets_are_the_next_items_then_the_row_target():
    item_seq = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [1, 2, 3, 4]])
    targets = next_item_targets(item_seq, torch.tensor([3, 1, 4]), torch.tensor([9, 3, 5]))
    assert targets.tolist() == [[6, 7, 9, 0], [3, 0, 0, 0], [2, 3, 4, 5]]


def test_windows_train_on_the_prefix_rows_they_replace(in_tmp):
    """Causal attention: position t of a window is the prefix row ending there. For users whose every
    training row fits in their window, the summed window loss equals the summed prefix-row loss."""
    config = tiny_recbole_config("SeqTransformer", **SMALL)
    model, _, (train_data, _, _) = build(config)
    model.eval()  # no dropout: both ways see the same network
    rows = train_data._dataset.inter_feat
    users, lengths = rows[model.USER_ID], rows[model.ITEM_SEQ_LEN]
    rows_per_user = torch.bincount(users)
    short_users = (rows_per_user > 0) & (rows_per_user <= model.max_seq_length)
    prefix_rows = rows[short_users[users]]
    last = torch.zeros_like(rows_per_user).scatter_reduce(0, users, torch.arange(len(users)), "amax")
    window_rows = rows[last[short_users.nonzero().squeeze(1)]]
    assert len(prefix_rows) > 2 * len(window_rows) > 0
    with torch.no_grad():
        prefix = model.backbone.training_loss(model, prefix_rows)[0] * len(prefix_rows)
        model.trains_on_windows = True
        assert model.training_target_count(window_rows) == len(prefix_rows) == int(window_rows[model.ITEM_SEQ_LEN].sum())
        window = model.backbone.training_loss(model, window_rows)[0] * len(prefix_rows)
    assert torch.allclose(window, prefix, rtol=1e-5), (float(window), float(prefix))
    assert (lengths[last[short_users.nonzero().squeeze(1)]] == rows_per_user[short_users]).all()


def test_the_training_loader_holds_each_users_latest_window(in_tmp):
    config = tiny_recbole_config("SeqTransformer", **SMALL, training_samples="windows")
    model, _, (windows, _, test_data) = build(config)
    prefixes = build(tiny_recbole_config("SeqTransformer", **SMALL))[2][0]._dataset.inter_feat
    rows = windows._dataset.inter_feat
    users = rows[model.USER_ID]
    assert users.unique().numel() == len(rows) == prefixes[model.USER_ID].unique().numel()
    for index in (0, len(rows) // 2, len(rows) - 1):  # each one is that user's last prefix row
        own = prefixes[prefixes[model.USER_ID] == users[index]]
        assert rows[model.POS_ITEM_ID][index] == own[model.POS_ITEM_ID][-1]
        assert torch.equal(rows[model.ITEM_SEQ][index], own[model.ITEM_SEQ][-1])
    # evaluation is untouched: the test loader holds every user's test row as under prefixes
    assert len(test_data._dataset) == len(build(tiny_recbole_config("SeqTransformer", **SMALL))[2][2]._dataset)


def test_negatives_exclude_every_item_the_user_trained_on(in_tmp):
    model, _, (train_data, _, _) = build(tiny_recbole_config("SeqTransformer", **SMALL, training_samples="windows",
                                                             loss_type="BCE"))
    # the model was built from every prefix row, so the history holds items older than the window
    rows = build(tiny_recbole_config("SeqTransformer", **SMALL))[2][0]._dataset.inter_feat
    history: dict[int, set[int]] = {}
    for user, target, first in zip(rows[model.USER_ID].tolist(), rows[model.POS_ITEM_ID].tolist(),
                                   rows[model.ITEM_SEQ][:, 0].tolist()):
        history.setdefault(user, set()).update({target, first})
    users = torch.tensor(sorted(history)).repeat_interleave(200)
    torch.manual_seed(0)
    negatives = model.window_negatives.sample(users)
    assert ((negatives >= 1) & (negatives < model.n_items)).all()
    assert not any(item in history[user] for user, item in zip(users.tolist(), negatives.tolist()))
    assert negatives.unique().numel() > 0.9 * (model.n_items - 1)  # uniform over the rest, not a few items


def test_a_user_with_every_item_gets_a_negative_after_the_redraw_limit():
    sampler = HistoryExcludingNegatives(torch.zeros(4, dtype=torch.long), torch.arange(1, 5), n_items=5)
    assert sampler.contains(torch.tensor([0, 1]), torch.tensor([3, 3])).tolist() == [True, False]
    assert ((sampler.sample(torch.zeros(3, dtype=torch.long)) >= 1)).all()  # terminates


@pytest.mark.parametrize("overrides, needle", [
    (["backbone=core"], "windows need a next-item or cloze backbone, not 'core'"),
    (["aux_losses=[{type: same_target_contrastive}]"], "aux loss 'same_target_contrastive' reads one target per"),
    (["training_samples=window"], "training_samples"),
])
def test_what_cannot_train_on_windows_is_a_one_line_error_naming_the_key(overrides, needle):
    windows = [] if "training_samples=window" in overrides else ["training_samples=windows"]
    with pytest.raises(ConfigError, match=needle) as error:
        resolve(TINY_DATA, ["model=SeqTransformer", *windows, *overrides])
    assert "\n" not in str(error.value) and "training_samples" in str(error.value)


@pytest.mark.parametrize("model, overrides", [
    ("SeqTransformer", []),
    ("SeqTransformer", ["loss_type=BCE"]),
    ("Denoiser", []),
    ("DenoiserTiSASRec", []),
    ("SeqTransformer", ["backbone=fdsa", f"load_col={GENRES}"]),  # two streams, both read at every position
    ("SeqTransformer", ["backbone=bert4rec"]),
    ("DenoiserBERT4Rec", ["loss_type=BCE"]),
])
def test_models_train_and_evaluate_on_windows(in_tmp, model, overrides):
    result = run(TINY_DATA, [f"model={model}", "training_samples=windows", "epochs=2", "hidden_size=16",
                             "inner_size=32", *overrides])
    history = json.loads((result.run_dir / "history.json").read_text())
    losses = [sum(value for name, value in e["train_loss"].items() if name != "total") for e in history]
    assert len(losses) == 2 and torch.isfinite(torch.tensor(losses)).all()
    assert 0 <= result.test_result["ndcg@10"] <= 1


def test_the_arm_signal_sums_the_loss_over_every_window_target(in_tmp):
    """``loss_reduction: sum`` multiplies the mean loss by the targets it averaged: every real position."""
    model, _, (train_data, _, _) = build(tiny_recbole_config("Denoiser", **SMALL, training_samples="windows"))
    batch = next(iter(train_data))
    assert model.training_target_count(batch) == int(batch[model.ITEM_SEQ_LEN].sum()) > len(batch)
    model.trains_on_windows = False
    assert model.training_target_count(batch) == len(batch)


def test_cloze_windows_mask_the_window_with_its_target_appended(in_tmp):
    """BERT4Rec's own training: the latest window plus the row's target, real items masked at
    ``mask_ratio``; the positions and items returned are exactly the masked ones."""
    model, _, (train_data, _, _) = build(tiny_recbole_config("SeqTransformer", **SMALL, backbone="bert4rec",
                                                             training_samples="windows", mask_ratio=0.5))
    batch = next(iter(train_data))
    torch.manual_seed(0)
    masked_seq, masked_index, positive = model.backbone.masked_window(model, batch)
    # The target after the history (a full window drops its oldest item; tested in test_backbone_ctr).
    window, _ = append_after_history(batch[model.ITEM_SEQ], batch[model.ITEM_SEQ_LEN], batch[model.POS_ITEM_ID],
                                     model.max_seq_length)
    assert (window == batch[model.POS_ITEM_ID][:, None]).any(1).all()
    is_mask = masked_seq == model.n_items
    assert torch.equal(torch.where(is_mask, window, masked_seq), window)  # only items were replaced
    assert not (is_mask & (window == 0)).any()  # padding is never masked
    for row in range(len(batch)):
        where = is_mask[row].nonzero().squeeze(1)
        assert masked_index[row, : len(where)].tolist() == where.tolist()
        assert positive[row, : len(where)].tolist() == window[row, where].tolist()
        assert (positive[row, len(where):] == 0).all()
    share = is_mask.sum() / (window > 0).sum()
    assert 0.4 < float(share) < 0.6
    model.train()
    model.backbone.training_loss(model, batch)
    assert model.training_target_count(batch) == int(model.backbone.targets_in_last_batch) > 0


@pytest.mark.parametrize("samples", ["prefixes", "windows"])
def test_a_cloze_batch_without_any_mask_trains_as_a_zero_loss(in_tmp, samples):
    """An epoch's last batch can be a few short rows that drew no [MASK] (Clothing's 9th epoch at
    mask ratio 0.2): RecBole's 0/0 made the step NaN and failed the run; it is now a zero loss."""
    model, _, (train_data, _, _) = build(tiny_recbole_config("SeqTransformer", **SMALL, backbone="bert4rec",
                                                             training_samples=samples))
    batch = next(iter(train_data))
    if samples == "prefixes":  # undo what RecBole's mask_itemseq transform drew
        masked_seq_field, positive_field, negative_field, index_field = model.backbone.mask_fields
        batch[masked_seq_field] = batch[model.ITEM_SEQ].clone()
        for field in (positive_field, negative_field, index_field):
            batch[field] = torch.zeros_like(batch[field])
    else:
        model.backbone.mask_ratio = 0.0
    model.train()
    loss = model.calculate_loss(batch)
    loss.backward()
    assert loss.item() == 0.0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
