"""model_steps.py end to end in quick mode, one subprocess per cell and ``--one-process``: a model whose
cell fails becomes a row with its error, and the rows that ran keep their times and ratios (a lent
GPU's minutes are not lost to one crash)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "model_steps.py"


@pytest.mark.parametrize("mode", [[], ["--one-process"]], ids=["subprocess-per-cell", "one-process"])
def test_a_failing_worker_is_a_row_not_the_end_of_the_run(tmp_path, mode):
    target = tmp_path / "steps.json"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--quick", "--models", "SeqTransformer,SASRec,NoSuchModel",
                           "--precision", "fp32", "--json", str(target), *mode], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(target.read_text())
    rows = {row["model"]: row for row in results["summary"]}
    assert rows["SeqTransformer"]["median_s_per_step"] > 0
    assert rows["SASRec"]["time_over"]["SASRec"] == 1.0 and rows["SASRec"]["time_over"]["SeqTransformer"] > 0
    assert rows["NoSuchModel"]["median_s_per_step"] is None
    assert "unknown model 'NoSuchModel'" in rows["NoSuchModel"]["error"]
    assert "torch" in results["hardware"]
    assert "NoSuchModel" in done.stdout and "failed" in done.stdout


def test_set_overrides_reach_this_projects_models_only(tmp_path):
    """``--set`` is resolved like ``recbole-ext run --set`` for our models (an unknown key is that row's
    error, named), while RecBole's own SASRec keeps its defaults and runs."""
    target = tmp_path / "steps.json"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--quick", "--one-process", "--models", "SeqTransformer,SASRec",
                           "--precision", "fp32", "--set", "no_such_key=1", "--json", str(target)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["model"]: row for row in json.loads(target.read_text())["summary"]}
    assert "unknown key 'no_such_key'" in rows["SeqTransformer"]["error"]
    assert rows["SASRec"]["median_s_per_step"] > 0
    assert "our models with no_such_key=1" in done.stdout


def test_models_without_the_transformer_keys_run_at_their_own_sizes(tmp_path):
    """The shared transformer sizes (``n_layers``, ``hidden_size``, ...) go only to models that have
    them: RecBole's Caser would refuse them as unknown keys, and its row would be an error."""
    target = tmp_path / "steps.json"
    done = subprocess.run([sys.executable, str(BENCHMARK), "--quick", "--one-process", "--models", "SeqTransformer,Caser",
                           "--precision", "fp32", "--json", str(target)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {row["model"]: row for row in json.loads(target.read_text())["summary"]}
    assert "error" not in rows["Caser"] and rows["Caser"]["median_s_per_step"] > 0
