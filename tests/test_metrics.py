"""SampleGAUC (FuxiCTR's gAUC): the vectorised statistic against pair counting, and its plumbing
through RecBole's Config, our collector and RecBole's Evaluator."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from recbole.data.interaction import Interaction
from recbole.evaluator import Evaluator

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.metrics import sample_weighted_gauc
from recbole_ext.runner import recbole_config
from recbole_ext.trainer import OnePositiveCollector

DIN_CONFIG = Path(__file__).parents[1] / "configs" / "cape_din_ml100k.yaml"


def gauc_by_pairs(labels, scores, users) -> float:
    """The definition, literally: per user, wins over all (positive, negative) pairs, ties half;
    weighted by the user's rows; users with one class skipped."""
    total = weight = 0.0
    for user in np.unique(users):
        rows = users == user
        positives, negatives = scores[rows & (labels == 1)], scores[rows & (labels == 0)]
        if len(positives) == 0 or len(negatives) == 0:
            continue
        wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(positives, negatives))
        total += wins / (len(positives) * len(negatives)) * rows.sum()
        weight += rows.sum()
    return total / weight


def test_small_case_by_hand():
    labels = np.array([1, 0, 1, 0, 1, 1, 0, 0, 1])
    scores = np.array([0.9, 0.1, 0.2, 0.8, 0.5, 0.5, 0.5, 0.4, 0.3])
    users = np.array([7, 7, 3, 3, 5, 5, 5, 5, 9])
    # user 7: 1.0 (2 rows); user 3: 0.0 (2 rows); user 5: pairs (0.5,0.5)=.5 x2, (0.5,0.4)=1 x2 -> 0.75
    # (4 rows); user 9 has no negative and is skipped.
    assert sample_weighted_gauc(labels, scores, users) == pytest.approx((2 * 1.0 + 2 * 0.0 + 4 * 0.75) / 8)


@pytest.mark.parametrize("seed", range(5))
def test_matches_pair_counting_with_ties_and_one_class_users(seed):
    rng = np.random.default_rng(seed)
    rows = 400
    users = rng.integers(0, 40, rows)
    labels = (rng.random(rows) < 0.3).astype(int)
    scores = rng.integers(0, 6, rows) / 5.0  # few distinct values: many ties within users
    assert sample_weighted_gauc(labels, scores, users) == pytest.approx(gauc_by_pairs(labels, scores, users), abs=1e-12)


def test_no_user_with_both_classes_is_nan():
    assert np.isnan(sample_weighted_gauc(np.array([1, 1, 0]), np.array([0.1, 0.2, 0.3]), np.array([1, 1, 2])))
    assert np.isnan(sample_weighted_gauc(np.array([]), np.array([]), np.array([])))


def labeled_config(metrics: str, in_tmp):
    return recbole_config(resolve(DIN_CONFIG, [f"metrics={metrics}", "valid_metric=SampleGAUC"]),
                          checkpoint_dir=Path(os.getcwd()) / "saved")


def test_evaluator_gets_user_ids_from_our_collector_once_per_evaluation(in_tmp):
    config = labeled_config("[SampleGAUC, AUC, LogLoss]", in_tmp)
    assert config["valid_metric_bigger"] is True
    rng = np.random.default_rng(0)
    users = torch.tensor(rng.integers(1, 30, 300))
    labels = torch.tensor((rng.random(300) < 0.4).astype(np.float32))
    scores = torch.tensor(rng.random(300), dtype=torch.float32)
    collector, evaluator = OnePositiveCollector(config), Evaluator(config)
    results = []
    for _ in range(2):  # two evaluations in a row (validation epochs): the second must not see the first's rows
        collector.data_collect(None)
        for batch in (slice(0, 128), slice(128, 300)):
            interaction = Interaction({config["USER_ID_FIELD"]: users[batch], config["LABEL_FIELD"]: labels[batch]})
            collector.eval_batch_collect(scores[batch], interaction, None, None)
        results.append(evaluator.evaluate(collector.get_data_struct()))
    expected = gauc_by_pairs(labels.numpy(), scores.numpy(), users.numpy())
    assert results[0]["samplegauc"] == pytest.approx(expected, abs=1e-4)  # RecBole rounds to 4 places
    assert results[1] == results[0]
    assert set(results[0]) == {"samplegauc", "auc", "logloss"}


def test_ranking_and_value_metrics_still_do_not_mix(in_tmp):
    with pytest.raises(ConfigError, match="can not be used at the same time"):
        labeled_config("[SampleGAUC, Hit]", in_tmp)


def test_one_row_per_user_gives_nan_with_a_warning(in_tmp, caplog):
    config = labeled_config("[SampleGAUC, AUC, LogLoss]", in_tmp)
    collector = OnePositiveCollector(config)
    interaction = Interaction({config["USER_ID_FIELD"]: torch.arange(1, 7),
                               config["LABEL_FIELD"]: torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])})
    collector.eval_batch_collect(torch.rand(6), interaction, None, None)
    with caplog.at_level("WARNING"):
        result = Evaluator(config).evaluate(collector.get_data_struct())
    assert np.isnan(result["samplegauc"]) and "SampleGAUC is NaN" in caplog.text
