"""scripts/runs_table.py: the docs' run tables come from run directories, never from unfinished runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import load_script


def fake_run(root: Path, name: str, seed: int, position: str, ndcg: float, status="finished") -> Path:
    run = root / name
    run.mkdir()
    metrics = {"status": status, "model": "SeqTransformer"}
    if status == "finished":
        metrics.update(best_epoch=3, epochs_run=5, best_valid_score=ndcg + 0.01, valid_metric="NDCG@10",
                       test={"ndcg@10": ndcg, "hit@10": 2 * ndcg}, wall_time_s=120.0)
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "position": {"type": position}}))
    return run


def test_table_averages_over_seeds_and_skips_unfinished(tmp_path, capsys):
    runs = [fake_run(tmp_path, "a", 1, "rope", 0.10), fake_run(tmp_path, "b", 2, "rope", 0.12),
            fake_run(tmp_path, "c", 1, "cape", 0.20), fake_run(tmp_path, "d", 2, "cape", 0.0, status="failed")]
    load_script("scripts/runs_table.py").main([*map(str, runs), "--label", "position", "--label", "seed", "--mean-over", "seed"])
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if line.startswith("| SeqTransformer")]
    assert rows[0].startswith("| SeqTransformer, position=rope | 2 |") and "0.1100 ± 0.0141" in rows[0]
    assert rows[1].startswith("| SeqTransformer, position=cape | 1 |") and "| 0.2000 |" in rows[1]
    assert "d: failed" in err


def test_missing_metric_is_a_one_line_error(tmp_path):
    run = fake_run(tmp_path, "a", 1, "rope", 0.1)
    with pytest.raises(SystemExit, match="recall@10.*not recorded"):
        load_script("scripts/runs_table.py").main([str(run), "--metrics", "recall@10"])


def test_a_directory_without_metrics_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="no metrics.json"):
        load_script("scripts/runs_table.py").main([str(tmp_path)])
