"""The command line: one-line errors with a non-zero exit for every kind of bad input."""
from __future__ import annotations

import subprocess
import sys

import pytest

from recbole_ext.cli import main

from .conftest import TINY_CONFIG


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, pattern):
    import re

    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("recbole-ext: error: "), err
    assert re.search(pattern, lines[0]), lines[0]


def test_run_prints_validation_and_test_metrics(capsys, in_tmp):
    code, out, _ = run_cli(capsys, "run", "--config", str(TINY_CONFIG), "--set", "epochs=1")
    assert code == 0
    assert "best valid (epoch 0): recall@10=" in out and "test: recall@10=" in out


@pytest.mark.parametrize(
    ("files", "argv", "pattern"),
    [
        ({}, ["run", "--config", "missing.yaml"], r"missing.yaml: config file not found"),
        ({"c.yaml": "model: SeqTransformer\ndataset: Beauty\n"}, ["run", "--config", "c.yaml"],
         r"c.yaml:2: dataset 'Beauty' needs .*/dataset/Beauty/Beauty.inter, which does not exist"),
        ({"c.yaml": "model: SeqTransformer\ndataset: Beauty\ndata_path: nowhere/\n"}, ["run", "--config", "c.yaml"],
         r"nowhere/Beauty/Beauty.inter"),
        ({"c.yaml": "extends: euler_ml1m.yaml\ndata_path: nowhere/\n"}, ["run", "--config", "c.yaml"],
         r"eulerformer-ml1m.inter, which does not exist; create them with: recbole-ext data convert "
         r"--preset eulerformer-ml1m --format grouplens"),
        ({"c.yaml": "model: EulerFormr\ndataset: ml-100k\n"}, ["run", "--config", "c.yaml"], r"c.yaml:1: unknown model 'EulerFormr'"),
        ({"c.yaml": "model: SeqTransformer\ndataset: ml-100k\nattention: eulr\n"}, ["run", "--config", "c.yaml"],
         r"c.yaml:3: attention: unknown attention 'eulr' \(did you mean 'euler'\?\); known: .*softmax"),
        ({"c.yaml": "model: SeqTransformer\n  dataset: [\n"}, ["run", "--config", "c.yaml"], r"c.yaml:2: invalid YAML"),
        ({"c.yaml": "model: SeqTransformer\ndataset: ml-100k\nepoch: 3\n"}, ["run", "--config", "c.yaml"],
         r"c.yaml:3: unknown key 'epoch' \(did you mean 'epochs'"),
        ({"c.yaml": "model: SeqTransformer\ndataset: ml-100k\n"}, ["run", "--config", "c.yaml", "--set", "epochs=many"],
         r"--set epochs: epochs: expected an integer, got 'many'"),
        ({"c.yaml": "model: SeqTransformer\ndataset: ml-100k\nmetrics: [NDCG, Recal]\n"}, ["run", "--config", "c.yaml"],
         r"RecBole rejected the config: There is no metric named 'Recal'"),
        ({}, ["evaluate", "--checkpoint", "nope.pth"], r"nope.pth: no such checkpoint file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, in_tmp, files, argv, pattern):
    for name, text in files.items():
        (in_tmp / name).write_text(text)
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, pattern)
    assert not (in_tmp / "runs").exists() or not any((in_tmp / "runs").iterdir())


def test_list_shows_models_and_sources(capsys):
    code, out, _ = run_cli(capsys, "list", "--parts")
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line and not line.startswith("[") and len(line.split()) == 2}
    assert rows["SeqTransformer"] == "recbole-ext" and rows["SASRec"] == "recbole" and rows["FEARec"] == "recbole"
    parts = {line.split("] ")[0][1:]: line.split("] ")[1].split(", ") for line in out.splitlines() if line.startswith("[")}
    assert "softmax" in parts["attention"] and {"bert4rec", "sasrec"} <= set(parts["backbone"])
    assert parts["attention"] == sorted(parts["attention"])


def test_console_script_exit_code():
    result = subprocess.run([sys.executable, "-m", "recbole_ext", "run", "--config", "does-not-exist.yaml"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_the_help_line_names_every_command():
    from recbole_ext.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command").choices
    assert parser.description == "The recbole-ext command: " + ", ".join(commands) + "."
