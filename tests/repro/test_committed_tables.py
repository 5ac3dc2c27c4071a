"""The tables committed under docs/results are what their committed records give.

Each table's header names the command that wrote it. Rerun report-only on a copy of the committed
records, with an empty run cache (as on a fresh clone), every table must come out with the same
numbers. A record committed later that a table would now read (a run of another table with the same
config, at the precision a report-only call prefers) changes the table; this catches the table left
unrebuilt, which once kept docs/results/ml100k/linrec-t3 on the records it was first built from.
"""
from __future__ import annotations

import csv
import shlex
import shutil
from pathlib import Path

import pytest

from recbole_ext.cli import main
from recbole_ext.repro import execute

from ..conftest import REPO

RESULTS = REPO / "docs" / "results"
COMMAND_PREFIX = "- command: `recbole-ext "
# the columns a table's numbers and verdicts live in; the header's date and hardware change each call
COMPARED = ("status", "ours_mean", "ours_std", "n_seeds", "ours_gain", "direction_holds", "p_value", "reason")


# cells without a run: whether their atomic files are here is the machine's business, not the records'
UNMEASURED = {"not run", "missing-data"}


def committed_tables() -> list[Path]:
    return sorted(path for path in RESULTS.rglob("*.md")
                  if any(line.startswith(COMMAND_PREFIX) for line in path.read_text().splitlines()[:12]))


def header_command(table_md: Path) -> list[str]:
    line = next(line for line in table_md.read_text().splitlines() if line.startswith(COMMAND_PREFIX))
    return shlex.split(line[len(COMMAND_PREFIX):].rstrip("`"))


def option_value(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]


def replaced(argv: list[str], option: str, value: str) -> list[str]:
    if option not in argv:
        return [*argv, option, value]
    at = argv.index(option)
    return [*argv[:at + 1], value, *argv[at + 2:]]


def csv_lines(path: Path) -> dict:
    with open(path) as handle:
        return {(line["dataset"], line["row"], line["metric"]): line for line in csv.DictReader(handle)}


def same(committed: str, rebuilt: str) -> bool:
    try:
        return float(committed) == pytest.approx(float(rebuilt), rel=1e-9, abs=1e-12)
    except ValueError:
        return committed == rebuilt


def test_the_committed_tables_are_found():
    names = {path.relative_to(RESULTS).as_posix() for path in committed_tables()}
    assert {"denoiser-t2.md", "ml100k/eulerformer-t3.md", "ml100k/linrec-t3.md"} <= names


@pytest.mark.parametrize("table_md", committed_tables(), ids=lambda path: path.relative_to(RESULTS).as_posix())
def test_a_committed_table_is_what_its_committed_records_give(table_md, tmp_path, monkeypatch):
    argv = header_command(table_md)
    assert argv[0] == "reproduce"
    out = REPO / option_value(argv, "--out")
    clone = tmp_path / "out"
    shutil.copytree(out / "records", clone / "records")
    argv = replaced(replaced(argv, "--out", str(clone)), "--cache", str(tmp_path / "no-cache"))
    if "--report-only" not in argv:
        argv.append("--report-only")

    def must_not_run(spec):
        raise AssertionError(f"report-only trained {spec.key}")

    monkeypatch.setattr(execute, "execute_run", must_not_run)
    monkeypatch.chdir(REPO)  # the commands name configs and data paths from the repository root
    assert main(argv) == 0
    committed = csv_lines(table_md.with_suffix(".csv"))
    rebuilt = csv_lines(clone / table_md.with_suffix(".csv").name)
    assert rebuilt.keys() == committed.keys()
    differing = [f"{'/'.join(where)} {column}: committed {line[column]!r}, records give {rebuilt[where][column]!r}"
                 for where, line in committed.items() for column in COMPARED
                 if column in line and not same(line[column], rebuilt[where][column])
                 and not {line["status"], rebuilt[where]["status"]} <= UNMEASURED]
    assert not differing, f"{table_md.relative_to(REPO)} is stale; rerun its header command:\n" + "\n".join(differing)
