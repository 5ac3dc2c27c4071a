"""Published cells whose printed metrics no single ranking gives (recbole_ext/repro/consistency.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from recbole_ext.repro.consistency import is_rank_metric, published_inconsistencies, rank_weights, smallest_conflict
from recbole_ext.repro.index import write_index
from recbole_ext.repro.report import RunInfo, write_csv, write_markdown
from recbole_ext.repro.tables import load_table, table_names

from .test_index import cell_lines, info

RECORDS = Path(__file__).parents[2] / "docs" / "results" / "records"
FEAREC_FLAGGED = {("bpr", "Beauty"), ("bpr", "Clothing"), ("bpr", "Sports"), ("gru4rec", "Beauty"),
                  ("caser", "Beauty"), ("caser", "Clothing"), ("caser", "Sports"), ("sasrec", "Beauty"),
                  ("cl4srec", "Sports"), ("coserec", "ML-1M"), ("fearec", "ML-1M")}


def metrics_by_definition(ranks: np.ndarray, key: str) -> float:
    """A metric of one held-out item per user, from each user's rank, as its textbook definition."""
    name, k = key.split("@")
    k = int(k)
    hit = ranks <= k
    per_user = {"hit": hit, "recall": hit, "precision": hit / k, "mrr": np.where(hit, 1 / ranks, 0),
                "ndcg": np.where(hit, 1 / np.log2(ranks + 1), 0)}[name]
    return float(np.mean(per_user))


@pytest.mark.parametrize("key", ["hit@5", "recall@10", "ndcg@10", "ndcg@200", "mrr@10", "precision@20"])
def test_rank_weights_give_each_metric_from_the_share_of_users_at_each_rank(key):
    ranks = np.random.default_rng(0).integers(1, 300, size=5000)
    share = np.bincount(ranks, minlength=301)[1:] / len(ranks)
    assert rank_weights(key, 300) @ share == pytest.approx(metrics_by_definition(ranks, key))
    assert rank_weights("auc", 300) is None and rank_weights("gauc@10", 10) is None


def test_metrics_of_one_evaluation_are_always_consistent_even_rounded():
    rng = np.random.default_rng(1)
    keys = ["hit@5", "hit@10", "ndcg@5", "ndcg@10", "mrr@10"]
    for _ in range(50):
        ranks = rng.geometric(rng.uniform(0.005, 0.3), size=2000)
        printed = [(key, key, round(metrics_by_definition(ranks, key), 4)) for key in keys]
        assert smallest_conflict(printed) is None
        in_percent = [(key, key, round(100 * metrics_by_definition(ranks, key), 2)) for key in keys]
        assert smallest_conflict(in_percent, scale=100) is None


def test_every_committed_record_of_ours_is_consistent():
    """Our test metrics come from one evaluation each: the check must never flag them."""
    checked = 0
    for path in sorted(RECORDS.glob("*.json")):
        test = json.loads(path.read_text()).get("test") or {}
        printed = [(key, key, value) for key, value in test.items() if is_rank_metric(key)]
        if len(printed) >= 2:
            assert smallest_conflict(printed) is None, path.name
            checked += 1
    assert checked >= 20


def test_a_conflict_names_the_smallest_set_and_bounds_its_last_metric():
    # FEARec's Table 2, SASRec on Beauty (from DuoRec's paper): NDCG@10 below what the rest allow.
    # Ranks 6-10 hold HR@10 - HR@5 = 0.0262 of the users, each adding 1/log2(11)..1/log2(7) to NDCG.
    conflict = smallest_conflict([("HR@5", "hit@5", 0.0365), ("HR@10", "hit@10", 0.0627),
                                  ("NDCG@5", "ndcg@5", 0.0236), ("NDCG@10", "ndcg@10", 0.0281)])
    assert conflict.metrics == ("HR@5", "HR@10", "NDCG@5", "NDCG@10") and conflict.target == "NDCG@10"
    low = 0.02355 + (0.0627 - 0.0001 - 0.0365) / math.log2(11)
    high = 0.02365 + (0.0627 + 0.0001 - 0.0365) / math.log2(7)
    assert (conflict.low, conflict.high) == (pytest.approx(low, abs=1e-6), pytest.approx(high, abs=1e-6))
    assert conflict.describe() == ("given HR@5, HR@10, NDCG@5 as printed, NDCG@10 can only lie in "
                                   "[0.03109, 0.03302] with one held-out item per user; the paper prints 0.0281")
    # one value alone: NDCG@10 can never exceed HR@10
    alone = smallest_conflict([("HR@10", "hit@10", 0.0213), ("NDCG@10", "ndcg@10", 0.0305), ("MRR", "mrr@10", 0.0101)])
    assert alone.metrics == ("HR@10", "NDCG@10")


def test_the_published_tables_flag_exactly_the_cells_no_ranking_gives():
    flagged = {name: {cell for cell, conflict in published_inconsistencies(load_table(name)).items() if conflict}
               for name in table_names()}
    assert flagged.pop("fearec-t2") == FEAREC_FLAGGED
    assert not any(flagged.values()), flagged
    # checked: leave-one-out ranking tables only (not CTR, statistics or efficiency)
    assert len(published_inconsistencies(load_table("eulerformer-t3"))) == 40
    for name in ("cape-t2", "fearec-t1", "linrec-t4"):
        assert published_inconsistencies(load_table(name)) == {}


def test_reports_mark_the_cells_and_say_what_conflicts(tmp_path):
    table = load_table("fearec-t2")
    lines = [*cell_lines(table, "sasrec", "Beauty", [0.05, 0.08, 0.03, 0.04]),
             *cell_lines(table, "fearec", "Beauty", [0.06, 0.09, 0.04, 0.05])]
    run = RunInfo(command="test", budget="paper", seeds=1, bf16=False, hardware="cpu", date="today", wall_time_s=0)
    write_markdown(table, lines, run, tmp_path / "fearec-t2.md")
    text = (tmp_path / "fearec-t2.md").read_text()
    assert "| SASRec † | NDCG@10 |" in text and "| FEARec | NDCG@10 |" in text
    assert "- Beauty / SASRec: given HR@5, HR@10, NDCG@5 as printed, NDCG@10 can only lie in [0.03109" in text
    assert "ML-1M / FEARec" not in text  # only the cells the report shows
    write_csv(table, lines, info(), tmp_path / "fearec-t2.csv")
    rows = (tmp_path / "fearec-t2.csv").read_text().splitlines()
    assert [row.rsplit(",", 1)[1] for row in rows] == ["published_consistent"] + ["False"] * 4 + ["True"] * 4
    index = write_index(tmp_path).read_text()
    assert "| Beauty | SASRec † |" in index and "| Beauty | FEARec |" in index
    assert "† No single ranking of one held-out item per user gives all the published values" in index


def test_list_names_the_published_cells_no_ranking_gives(capsys):
    from recbole_ext.cli import main

    assert main(["reproduce", "--list", "fearec-t2", "--datasets", "Beauty"]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "† published: given HR@5, HR@10, NDCG@5 as printed, NDCG@10 can only lie in [0.03109" in lines["SASRec"]
    assert "†" not in lines["FEARec"]
