"""`recbole-ext tune`: sweep checks (no Ray started), then real sweeps on the tiny ml-100k fixture.

The slow tests start Ray: a 2x2 grid with 2 concurrent trials, a two-node cluster joined with
--address, and a sweep killed mid-way then resumed.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from recbole_ext.cli import main
from recbole_ext.errors import ConfigError
from recbole_ext.tune.driver import SweepOutcome, run_sweep
from recbole_ext.tune.report import rows_from_results
from recbole_ext.tune.sweep import check_sweep, parse_sweep

from .conftest import TINY_CONFIG

pytest.importorskip("ray.tune")

GRID_2X2 = "example_ml100k.yaml"


def write_sweep(directory: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def tune_cli(*args: str) -> list[str]:
    return ["tune", "--config", str(TINY_CONFIG), *args]


def read_rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "results.csv") as handle:
        return list(csv.DictReader(handle))


def run_metrics(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / "metrics.json").read_text())


# ---------------------------------------------------------------------------------------------
# Sweep files: errors before Ray starts


BAD_SWEEPS = {
    "unknown parameter": ("space:\n  hiden_size: {grid: [16, 32]}\n", ["space.hiden_size", "did you mean 'hidden_size'"]),
    "unknown part option": ("space:\n  attention.scalle: {grid: [0.5]}\n", ["space.attention.scalle", "scalle"]),
    "value out of range": ("space:\n  learning_rate: {grid: [0.01, -1]}\n", ["space.learning_rate", "-1"]),
    "empty grid": ("space:\n  learning_rate: {grid: []}\n", ["space.learning_rate", "empty grid"]),
    "unknown distribution": ("space:\n  learning_rate: {logunifrom: [1.0e-4, 1.0e-2]}\n", ["space.learning_rate", "'logunifrom'", "loguniform"]),
    "reversed range": ("space:\n  learning_rate: {uniform: [0.1, 0.01]}\n", ["space.learning_rate", "low < high"]),
    "unknown scheduler": ("scheduler: {type: hyperband}\nspace:\n  seed: {grid: [1]}\n", ["scheduler", "'hyperband'", "asha"]),
    "unknown scheduler option": ("scheduler: {type: asha, grace: 2}\nspace:\n  seed: {grid: [1]}\n", ["scheduler.grace", "grace_period"]),
    "unknown sweep key": ("num_sample: 3\nspace:\n  seed: {grid: [1]}\n", ["num_sample", "did you mean 'num_samples'"]),
    "managed key": ("space:\n  num_threads: {grid: [1, 2]}\n", ["space.num_threads", "set by `recbole-ext tune`"]),
    "no space": ("mode: max\n", ["no 'space' key"]),
}


@pytest.mark.parametrize("case", sorted(BAD_SWEEPS))
def test_bad_sweep_files_give_one_line_errors(in_tmp, capsys, case):
    body, expected = BAD_SWEEPS[case]
    metric = "" if "metric" in body else "metric: NDCG@10\n"
    sweep = write_sweep(in_tmp, metric + body)
    assert main(tune_cli("--sweep", str(sweep))) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert error.startswith(f"recbole-ext: error: {sweep}")
    for fragment in expected:
        assert fragment in error, (fragment, error)
    assert not (in_tmp / "tune_runs").exists()  # nothing started


def test_metric_must_be_a_validation_metric_of_the_config(in_tmp):
    sweep = parse_sweep(write_sweep(in_tmp, "metric: NDCG@5\nspace:\n  seed: {grid: [1, 2]}\n"))
    with pytest.raises(ConfigError, match=r"'NDCG@5' is not a validation metric .*ndcg@10"):
        check_sweep(sweep, TINY_CONFIG)


def test_every_combination_is_checked(in_tmp):
    """Each value resolves alone; one pair breaks a cross-key rule (n_heads must divide hidden_size)."""
    sweep = parse_sweep(write_sweep(in_tmp, "metric: NDCG@10\nspace:\n  hidden_size: {grid: [32, 30]}\n"
                                             "  n_heads: {grid: [2, 4]}\n"))
    with pytest.raises(ConfigError, match=r"space point \{'hidden_size': 30, 'n_heads': 4\}"):
        check_sweep(sweep, TINY_CONFIG)


def test_command_line_set_may_not_touch_a_swept_key(in_tmp):
    sweep = parse_sweep(GRID_2X2)
    with pytest.raises(ConfigError, match="--set learning_rate: this key is swept"):
        check_sweep(sweep, TINY_CONFIG, ["learning_rate=0.1"])


def test_sweep_names_are_found_in_configs_sweeps(in_tmp):
    sweep = parse_sweep(GRID_2X2)
    assert sweep.path.parent.name == "sweeps" and sweep.trial_count() == 4
    assert sweep.scheduler.type == "asha" and sweep.max_concurrent == 2
    assert check_sweep(sweep, TINY_CONFIG, ["epochs=1"]).values["epochs"] == 1


def test_missing_ray_is_a_one_line_error(in_tmp, capsys, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] == "ray" else real_find_spec(name, *a))
    assert main(tune_cli("--sweep", GRID_2X2)) == 2
    assert capsys.readouterr().err.strip() == "recbole-ext: error: Ray Tune is not installed: pip install recbole-ext[tune]"


def fake_result(trial_id, learning_rate, reports, error=None):
    """What the report reads from one of Ray's ``Result`` objects."""
    import pandas

    frame = pandas.DataFrame([{**{f"{group}/{k}": v for group in ("valid", "test") for k, v in r.get(group, {}).items()},
                               **{k: v for k, v in r.items() if k not in ("valid", "test")}} for r in reports])
    return SimpleNamespace(metrics_dataframe=frame, config={"learning_rate": learning_rate}, path=f"/x/{trial_id}",
                           error=error, metrics={"trial_id": trial_id})


def test_results_are_ranked_and_the_best_is_a_finished_trial(in_tmp):
    sweep = parse_sweep(write_sweep(in_tmp, "metric: NDCG@10\nspace:\n  learning_rate: {loguniform: [1.0e-4, 1.0e-2]}\n"))
    epoch = lambda n, score: {"epoch": n, "valid": {"ndcg@10": score}}  # noqa: E731
    final = {"finished": True, "best_epoch": 1, "valid": {"ndcg@10": 0.30}, "test": {"ndcg@10": 0.25}, "epoch": 3}
    rows = rows_from_results([
        fake_result("finished", 1e-3, [epoch(1, 0.2), epoch(2, 0.3), epoch(3, 0.28), final]),
        fake_result("stopped", 1e-2, [epoch(1, 0.35), epoch(2, 0.31)]),  # better, but stopped by ASHA
        fake_result("broken", 1e-4, [epoch(1, 0.9)], error=RuntimeError("Traceback ...\nValueError: boom")),
        fake_result("pending", 2e-4, []),
        # a trial an interrupted sweep never started: Ray gives it no config and no metrics
        SimpleNamespace(metrics_dataframe=None, config=None, path="/x/never", error=None, metrics=None),
    ], sweep)
    assert [(r.trial_id, r.status) for r in rows] == [("stopped", "stopped"), ("finished", "finished"),
                                                      ("broken", "error"), ("pending", "not run"), ("never", "not run")]
    assert rows[-1].params == {"learning_rate": None}
    assert rows[0].score == 0.35 and rows[0].epochs == 2 and rows[0].test == {}
    assert rows[1].score == 0.30 and rows[1].epochs == 3 and rows[1].best_epoch == 1 and rows[1].test == {"ndcg@10": 0.25}
    assert rows[2].error == "ValueError: boom"
    assert SweepOutcome(in_tmp, rows).best.trial_id == "finished"


# ---------------------------------------------------------------------------------------------
# Real sweeps


@pytest.mark.slow
def test_grid_with_two_concurrent_trials(in_tmp, capsys):
    """The example sweep's 2x2 grid, 1 epoch each, 2 trials at a time, through the command line."""
    from recbole_ext.runner import run

    assert main(tune_cli("--sweep", GRID_2X2, "--set", "epochs=1", "--max-concurrent", "2")) == 0
    out = capsys.readouterr().out
    assert "4 finished" in out and "epoch 1: valid ndcg@10=" in out
    sweep_dir = in_tmp / "tune_runs" / "example_ml100k"
    rows = read_rows(sweep_dir)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"finished"}
    scores = [float(r["best_valid_ndcg@10"]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert {(r["learning_rate"], r["hidden_size"]) for r in rows} == {(a, b) for a in ("0.001", "0.01") for b in ("32", "64")}

    run_dirs = [Path(r["run_dir"]) for r in rows]
    assert len(set(run_dirs)) == 4 and all(d.parent == sweep_dir / "runs" for d in run_dirs)
    checkpoints = [(d / "model.pth").read_bytes() for d in run_dirs]
    assert len(set(checkpoints)) == 4  # one checkpoint per trial, none overwritten
    for row, run_dir in zip(rows, run_dirs):
        metrics = run_metrics(run_dir)
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert metrics["status"] == "finished" and metrics["best_valid_score"] == pytest.approx(float(row["best_valid_ndcg@10"]), abs=1e-4)
        assert metrics["test"]["ndcg@10"] == pytest.approx(float(row["test_ndcg@10"]), abs=1e-4)
        assert config["num_threads"] == 1 and config["valid_metric"] == "NDCG@10"
        assert str(config["learning_rate"]) == row["learning_rate"] and str(config["hidden_size"]) == row["hidden_size"]
    if len(os.sched_getaffinity(0)) >= 2:  # two trials ran at the same time
        spans = sorted((time.mktime(time.strptime(m["started"], "%Y-%m-%dT%H:%M:%S")), m["wall_time_s"])
                       for m in map(run_metrics, run_dirs))
        assert any(later_start < start + wall for (start, wall), (later_start, _) in zip(spans, spans[1:]))

    assert (sweep_dir / "results.md").read_text().count("| finished |") == 4
    assert (sweep_dir / "metric_vs_params.png").read_bytes()[:4] == b"\x89PNG"
    best = run(sweep_dir / "best.yaml", ["output_dir=rerun"])
    best_trial = run_metrics(run_dirs[0])
    assert best.best_valid_score == best_trial["best_valid_score"]
    assert best.best_valid_result == best_trial["valid"]


@pytest.mark.slow
def test_sweep_on_a_two_node_cluster(in_tmp, monkeypatch):
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        sweep = write_sweep(in_tmp, "metric: NDCG@10\nspace:\n  learning_rate: {grid: [0.001, 0.01]}\nset: {epochs: 1}\n")
        done = subprocess.run([sys.executable, "-m", "recbole_ext", *tune_cli("--sweep", str(sweep), "--address", cluster.address)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        node_ids = {node.node_id for node in cluster.list_all_nodes()}
    finally:
        cluster.shutdown()
    rows = read_rows(in_tmp / "tune_runs" / "sweep")
    assert [r["status"] for r in rows] == ["finished", "finished"]
    assert {r["node_id"] for r in rows} == node_ids and len(node_ids) == 2  # one trial on each node


@pytest.mark.slow
def test_killed_sweep_resumes_without_rerunning_finished_trials(in_tmp):
    sweep = write_sweep(in_tmp, "metric: NDCG@10\nspace:\n  learning_rate: {grid: [0.001, 0.003, 0.01]}\nset: {epochs: 1}\n")
    command = [sys.executable, "-m", "recbole_ext", *tune_cli("--sweep", str(sweep), "--max-concurrent", "1")]
    runs = in_tmp / "tune_runs" / "sweep" / "runs"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and process.poll() is None:
            finished = [d for d in runs.glob("*") if (d / "metrics.json").is_file() and run_metrics(d)["status"] == "finished"]
            if finished:
                break
            time.sleep(0.5)
        assert process.poll() is None, "the sweep ended before it could be interrupted"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    before = {d.name: run_metrics(d) for d in finished}

    resumed = subprocess.run(command + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = read_rows(in_tmp / "tune_runs" / "sweep")
    assert len(rows) == 3 and {r["status"] for r in rows} == {"finished"}
    assert {r["learning_rate"] for r in rows} == {"0.001", "0.003", "0.01"}
    for name, metrics in before.items():  # not rerun: the run directory is the one from before the kill
        assert run_metrics(runs / name) == metrics
    with pytest.raises(ConfigError, match="a sweep with this name exists; pass --resume to continue it"):
        run_sweep(TINY_CONFIG, sweep)
