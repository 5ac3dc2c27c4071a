"""Evaluation metrics RecBole 1.2.1 lacks, registered into its evaluator so that configs name them
as they name RecBole's own (``metrics: [SampleGAUC, AUC, LogLoss]``, ``valid_metric: SampleGAUC``).

``SampleGAUC`` is the grouped AUC of FuxiCTR, the library behind CAPE's Table 2 (specs/cape.md
§3.5): the AUC of each user's labeled rows, averaged with weights equal to the user's number of
rows, over users who have both a positive and a negative row. RecBole's ``GAUC`` is a different
quantity (a full-ranking metric weighted by positives), so it cannot stand in for the paper's gAUC.

RecBole's collector does not keep user ids; the project's collector
(:class:`recbole_ext.trainer.OnePositiveCollector`) collects them under :data:`USER_RESOURCE` when a
registered metric asks for it.
"""
from __future__ import annotations

from logging import getLogger

import numpy as np
from recbole.evaluator import register
from recbole.evaluator.base_metric import LossMetric
from recbole.utils import EvaluatorType

USER_RESOURCE = "data.user_id"


def sample_weighted_gauc(labels: np.ndarray, scores: np.ndarray, users: np.ndarray) -> float:
    """Per-user AUC weighted by the user's row count; users with one class only are skipped.

    Each user's AUC is the Mann-Whitney statistic with tied scores counted as half a win (as
    scikit-learn's ``roc_auc_score``), computed for all users at once from within-user ranks.
    NaN when no user has both classes.
    """
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    users = np.asarray(users).reshape(-1)
    count = len(labels)
    if count == 0:
        return float("nan")
    order = np.lexsort((scores, users))
    users, scores, labels = users[order], scores[order], labels[order]
    starts_user = np.r_[True, users[1:] != users[:-1]]
    starts_tie = starts_user | np.r_[True, scores[1:] != scores[:-1]]
    # A run of equal scores within a user shares the mean of its positions: the tie-averaged rank.
    tie_first = np.flatnonzero(starts_tie)
    tie_last = np.r_[tie_first[1:], count] - 1
    tie_of_row = np.cumsum(starts_tie) - 1
    user_first_position = np.maximum.accumulate(np.where(starts_user, np.arange(count), 0))
    rank = (tie_first + tie_last)[tie_of_row] / 2 - user_first_position + 1
    user_of_row = np.cumsum(starts_user) - 1
    rows = np.bincount(user_of_row).astype(np.float64)
    positives = np.bincount(user_of_row, weights=labels)
    positive_rank_sum = np.bincount(user_of_row, weights=rank * labels)
    negatives = rows - positives
    both = (positives > 0) & (negatives > 0)
    if not both.any():
        return float("nan")
    pos, neg = positives[both], negatives[both]
    auc = (positive_rank_sum[both] - pos * (pos + 1) / 2) / (pos * neg)
    return float(np.sum(auc * rows[both]) / np.sum(rows[both]))


class SampleGAUC(LossMetric):
    """FuxiCTR's gAUC for labeled evaluation (``eval_args.mode: labeled``); see the module docstring."""

    metric_type = EvaluatorType.VALUE
    metric_need = ["rec.score", "data.label", USER_RESOURCE]
    smaller = False

    def calculate_metric(self, dataobject):
        scores, labels = self.used_info(dataobject)
        users = dataobject.get(USER_RESOURCE).reshape(-1).numpy()
        value = sample_weighted_gauc(labels, scores, users)
        if np.isnan(value):
            getLogger().warning(
                "SampleGAUC is NaN: no user has both a positive and a negative row in this split "
                "(leave-one-out labeled data has one row per user; the reczoo CTR data has two)")
        return {"samplegauc": round(value, self.decimal_place)}


EXTRA_METRICS = (SampleGAUC,)


def register_metrics() -> None:
    """Add :data:`EXTRA_METRICS` to RecBole's metric tables (idempotent). RecBole's ``Config`` and
    ``Evaluator`` read these same dict/list objects, so registering once per process is enough."""
    for metric in EXTRA_METRICS:
        name = metric.__name__.lower()
        register.metrics_dict[name] = metric
        register.metric_information[name] = metric.metric_need
        register.metric_types[name] = metric.metric_type
        if metric.smaller and name not in register.smaller_metrics:
            register.smaller_metrics.append(name)
