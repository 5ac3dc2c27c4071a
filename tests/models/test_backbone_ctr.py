"""The ``ctr`` backbone (SASRec and BST as CTR models, CAPE Table 2): candidate placement, labeled
training and evaluation, exact trimming, and its config refusals."""
from __future__ import annotations

import os
from copy import deepcopy
from pathlib import Path

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.utils import init_seed

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.models import SeqTransformer
from recbole_ext.models.backbones import append_after_history
from recbole_ext.runner import recbole_config, run

CTR_CONFIG = Path(__file__).parents[2] / "configs" / "cape_sasrec_ctr_ml100k.yaml"
TINY = ["user_inter_num_interval=[0,25]", "MAX_ITEM_LIST_LENGTH=21", "epochs=1", "hidden_size=16", "inner_size=16",
        "train_batch_size=512", "eval_batch_size=4096", "show_progress=false", "state=WARNING"]
BST = "backbone={type: ctr, causal: false, pooling: mean, head_hidden: [16]}"
SASREC_CTR = "backbone={type: ctr, head_hidden: [16]}"


def test_candidate_goes_after_the_history_and_full_rows_drop_their_oldest_item():
    sequences = torch.tensor([[5, 6, 0], [7, 0, 0], [1, 2, 3]])
    lengths = torch.tensor([2, 1, 3])
    candidates = torch.tensor([9, 8, 4])
    # Room for one more column (max 4): the batch widens; nothing is dropped.
    widened, position = append_after_history(sequences, lengths, candidates, max_length=4)
    assert widened.tolist() == [[5, 6, 9, 0], [7, 8, 0, 0], [1, 2, 3, 4]] and position.tolist() == [2, 1, 3]
    # At the maximum width the full row loses its oldest item.
    kept, position = append_after_history(sequences, lengths, candidates, max_length=3)
    assert kept.tolist() == [[5, 6, 9], [7, 8, 0], [2, 3, 4]] and position.tolist() == [2, 1, 2]
    # No full row: the batch keeps its width.
    short, position = append_after_history(sequences[:2], lengths[:2], candidates[:2], max_length=5)
    assert short.shape == (2, 3) and position.tolist() == [2, 1]


def loaders_and_model(backbone: str, extra=()):
    config = recbole_config(resolve(CTR_CONFIG, TINY + [backbone, *extra]), checkpoint_dir=Path(os.getcwd()) / "saved")
    train, valid, test = data_preparation(config, create_dataset(config))
    init_seed(0, True)
    return config, train, test, SeqTransformer(config, train._dataset).eval()


def first_batch(loader):
    batch = next(iter(loader))
    return batch[0] if isinstance(batch, tuple) else batch


@pytest.mark.parametrize("backbone", [SASREC_CTR, BST])
def test_rows_that_differ_only_in_the_candidate_get_their_own_scores(backbone, in_tmp):
    _, _, test, model = loaders_and_model(backbone)
    rows = first_batch(test)[torch.zeros(6, dtype=torch.long)]  # one history six times
    rows[model.ITEM_ID] = torch.tensor([3, 17, 40, 41, 99, 250])
    with torch.no_grad():
        together = model.predict(rows)
        alone = torch.cat([model.predict(rows[[i]]) for i in range(6)])
    torch.testing.assert_close(together, alone, rtol=0, atol=1e-6)
    assert len(set(together.tolist())) == 6 and bool(((together > 0) & (together < 1)).all())


@pytest.mark.parametrize("backbone", [SASREC_CTR, BST])
def test_trimmed_batches_score_like_untrimmed_ones(backbone, in_tmp):
    _, _, test, model = loaders_and_model(backbone, ["MAX_ITEM_LIST_LENGTH=60"])
    batch = first_batch(test)
    assert int(batch[model.ITEM_SEQ_LEN].max()) + 1 < batch[model.ITEM_SEQ].size(1)  # padding to trim
    with torch.no_grad():
        trimmed = model.predict(batch)
        model.trims_padding = model.packs_tokens = False
        untrimmed = model.predict(batch)
    torch.testing.assert_close(trimmed, untrimmed, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backbone", [SASREC_CTR, BST])
def test_pruned_last_block_gives_the_same_loss_gradients_and_scores(backbone, in_tmp):
    """SASRec-CTR reads one state per row (the candidate's), so the last block runs there alone;
    BST's mean pooling reads every state and keeps the block whole. Dropout on: same random stream."""
    _, train, test, model = loaders_and_model(backbone, ["hidden_dropout_prob=0.3", "attn_dropout_prob=0.3"])
    train_batch, test_batch = first_batch(train), first_batch(test)  # the training loader reshuffles
    outputs = []
    for prune in (False, True):
        copy = deepcopy(model)
        copy.prunes_unread_states = prune and model.prunes_unread_states
        copy.train()
        torch.manual_seed(7)
        loss = copy.calculate_loss(train_batch)
        loss.backward()
        copy.eval()
        with torch.no_grad():
            scores = copy.predict(test_batch)
        outputs.append((loss.detach(), [p.grad for p in copy.parameters()], scores))
    assert model.prunes_unread_states
    torch.testing.assert_close(outputs[0][0], outputs[1][0], rtol=1e-4, atol=1e-5)
    for first, second in zip(outputs[0][1], outputs[1][1]):
        torch.testing.assert_close(first, second, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outputs[0][2], outputs[1][2], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backbone", [SASREC_CTR, BST])
def test_trains_on_labels_and_evaluates_auc_logloss(backbone, in_tmp):
    result = run(CTR_CONFIG, TINY + [backbone, "position=cope"])
    assert set(result.test_result) == {"auc", "logloss"}
    assert 0.0 <= result.test_result["auc"] <= 1.0 and result.test_result["logloss"] > 0


def test_the_loss_is_bce_on_the_label_field(in_tmp):
    _, train, _, model = loaders_and_model(SASREC_CTR)
    batch = first_batch(train)
    model.train()
    init_seed(0, True)
    loss = model.calculate_loss(batch)
    init_seed(0, True)
    logits, _ = model.backbone.candidate_logits(model, model.trimmed(batch))
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["label"].float())
    torch.testing.assert_close(loss, expected)
    assert set(batch["label"].unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("override, key", [
    ("eval_args={split: {LS: valid_and_test}, order: TO, mode: full}", "eval_args"),
    ("train_neg_sample_args={distribution: uniform, sample_num: 1}", "train_neg_sample_args"),
    ("backbone={type: ctr, pooling: max}", "pooling"),
    ("backbone={type: ctr, head_hidden: [16, 0]}", "head_hidden"),
    ("LABEL_FIELD=~", "LABEL_FIELD"),
])
def test_refuses_settings_it_cannot_use(override, key, in_tmp):
    with pytest.raises(ConfigError, match=key):
        recbole_config(resolve(CTR_CONFIG, TINY + [override]))


def test_has_no_full_ranking(in_tmp):
    _, _, test, model = loaders_and_model(SASREC_CTR)
    with pytest.raises(ConfigError, match="full ranking"):
        model.full_sort_predict(first_batch(test))
