"""Smoke tests of benchmarks/eval_throughput.py and benchmarks/data_share.py: their workers run in
process on ml-100k (our model only: stock RecBole would switch anomaly mode on for later tests) and
their time accounts add up."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import train_step as their neighbour
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # train_step's setup cuts sys.argv: restore pytest's
    yield lambda name: importlib.import_module(name)
    for name in ("eval_throughput", "data_share"):
        sys.modules.pop(name, None)


def worker_args(scratch: Path, **values) -> argparse.Namespace:
    return argparse.Namespace(**{"scratch": str(scratch), "threads": 0, "length": 50, "warmup": 0, "steps": 1, **values})


def test_cut_after_ends_the_epoch_after_limit_calls(benchmarks):
    data_share = benchmarks("data_share")
    collate = data_share.cut_after(lambda index: index, 2)
    assert [collate(0), collate(1)] == [0, 1]
    with pytest.raises(data_share.EpochCut):
        collate(2)
    unlimited = data_share.cut_after(lambda index: index, 0)
    assert [unlimited(i) for i in range(5)] == list(range(5))


@pytest.mark.parametrize("mode", ["full", "uni100"])
def test_evaluation_worker_profile_adds_up(benchmarks, in_tmp, mode):
    eval_throughput = benchmarks("eval_throughput")
    row = eval_throughput.worker("ours-fp32", worker_args(in_tmp, dataset="ml-100k", batch=4096, mode=mode))
    assert row["users"] == 943  # ml-100k: every user is a test user under leave-one-out (one positive each)
    assert row["score_gap"] is None  # no stock run wrote reference scores
    assert set(row["metrics"]) >= {"recall@10", "ndcg@10"}
    profile = row["profile"]
    parts = ("collate", "forward", "scoring", "collector", "metrics", "other")
    assert sum(profile[part] for part in parts) == pytest.approx(profile["total"])
    assert min(profile[part] for part in parts[:-1]) > 0  # every wrapped call was reached


def test_recboles_model_through_our_trainer_scores_each_history_once(benchmarks, in_tmp):
    import torch

    eval_throughput = benchmarks("eval_throughput")
    try:
        row = eval_throughput.worker("stock-trainer", worker_args(in_tmp, dataset="ml-100k", batch=4096, mode="uni100"))
    finally:
        torch.autograd.set_detect_anomaly(False)  # RecBole's SASRec import switched it on
    assert row["users"] == 943 and set(row["metrics"]) >= {"recall@10", "ndcg@10"}
    profile = row["profile"]
    # the profiler's predict wrapper is set aside during our trainer's sampled evaluation: time in
    # "forward" is full_sort_predict's, once per history
    assert profile["forward"] > 0
    assert sum(profile[part] for part in ("collate", "forward", "scoring", "collector", "metrics", "other")) \
        == pytest.approx(profile["total"])


def test_data_share_worker_stops_after_the_asked_batches(benchmarks, in_tmp):
    data_share = benchmarks("data_share")
    row = data_share.worker("ml-100k:BPR", worker_args(in_tmp, batch=64, steps=2, bucketing=0))
    assert row["batches"] == 2 and row["all_batches"] > 2
    assert row["loader_s"] > 0 and row["compute_s"] > 0
