"""The trainer's sampled evaluation for models without a per-history path of their own (RecBole's):
one ``full_sort_predict`` per history, with the metrics of RecBole's row-by-row ``predict``, and
RecBole's way wherever the two disagree."""
from __future__ import annotations

import pytest
import torch
from recbole.utils import init_seed

from recbole_ext.runner import build
from recbole_ext.trainer import trainer_class

from .conftest import tiny_recbole_config
from .models.test_backbone_core import GENRES

UNI100 = "{split: {LS: valid_and_test}, order: TO, group_by: user, mode: uni100}"


def sampled_trainer(model_name: str, **overrides):
    sizes = {"hidden_size": 16, "inner_size": 32} if model_name == "SeqTransformer" else {"embedding_size": 16}
    if model_name in ("GRU4Rec", "NARM"):
        sizes["hidden_size"] = 16
    config = tiny_recbole_config(model_name, eval_args=UNI100, **sizes, **overrides)
    model, _, (_, _, test_data) = build(config)
    return trainer_class(config)(config, model), test_data


def evaluate_counting_encoded_rows(trainer, test_data) -> tuple[dict, int]:
    """Metrics, and how many rows the model's ``forward`` encoded. Seeded: the loader draws new
    negatives on every pass."""
    init_seed(2020, reproducibility=True)
    encoded = []
    forward = trainer.model.forward
    trainer.model.forward = lambda *inputs: encoded.append(len(inputs[0])) or forward(*inputs)
    try:
        return trainer.evaluate(test_data, load_best_model=False), sum(encoded)
    finally:
        del trainer.model.forward


@pytest.mark.parametrize("model_name, load_col", [("GRU4Rec", None), ("Caser", None), ("NARM", None), ("FPMC", None),
                                                   ("BPR", None), ("GRU4Rec", GENRES)])
def test_each_history_is_scored_once_with_the_row_by_row_metrics(in_tmp, model_name, load_col):
    # With item features loaded, RecBole joins the candidate's into each sampled row: they vary
    # within a history's rows and must not split its run (linrec-ml1m's genre did).
    trainer, test_data = sampled_trainer(model_name, **({"load_col": load_col} if load_col else {}))
    once, encoded_once = evaluate_counting_encoded_rows(trainer, test_data)
    assert trainer.scores_each_history_once is True
    trainer.scores_each_history_once = False  # RecBole's row-by-row predict
    row_by_row, encoded_row_by_row = evaluate_counting_encoded_rows(trainer, test_data)
    assert once == pytest.approx(row_by_row, abs=1e-4)
    users = test_data._dataset.user_num - 1
    if encoded_row_by_row:  # the sequential models encode a history in forward; FPMC and BPR score in predict
        assert encoded_row_by_row >= 100 * users and encoded_once < 1.1 * users + 512  # 512: the first batch's check


class Shifted:
    """full_sort_predict one above predict's: the same ranking, but not the same scores."""

    def full_sort_predict(self, interaction):
        return super().full_sort_predict(interaction) + 1.0


class NoFullSort:
    def full_sort_predict(self, interaction):
        raise NotImplementedError


@pytest.mark.parametrize("mixin", [Shifted, NoFullSort])
def test_disagreeing_or_missing_full_sort_scores_fall_back_to_row_by_row(in_tmp, mixin):
    trainer, test_data = sampled_trainer("GRU4Rec")
    expected, _ = evaluate_counting_encoded_rows(trainer, test_data)
    trainer.scores_each_history_once = None
    trainer.model.__class__ = type(f"{mixin.__name__}GRU4Rec", (mixin, type(trainer.model)), {})
    fallen_back, encoded = evaluate_counting_encoded_rows(trainer, test_data)
    assert trainer.scores_each_history_once is False
    assert fallen_back == pytest.approx(expected, abs=1e-4)
    assert encoded >= 100 * (test_data._dataset.user_num - 1)
    assert "predict" not in vars(trainer.model)  # RecBole's own method again after evaluation


def test_models_with_their_own_per_history_path_are_left_alone(in_tmp):
    trainer, _ = sampled_trainer("SeqTransformer")
    assert trainer.scores_each_history_once is False
