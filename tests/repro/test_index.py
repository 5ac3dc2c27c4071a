"""``<out>/README.md``: the done cells of every table CSV under ``--out``, ours beside published."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from recbole_ext.cli import main
from recbole_ext.errors import ConfigError
from recbole_ext.repro.index import INDEX_NAME, read_table_csv, write_index
from recbole_ext.repro.report import RunInfo, write_csv
from recbole_ext.repro.results import Line
from recbole_ext.repro.tables import load_table

TINY_TABLE = Path(__file__).with_name("tiny_table.yaml")


def info(budget: str = "paper") -> RunInfo:
    return RunInfo(command="test", budget=budget, seeds=1, bf16=False, hardware="cpu", date="today", wall_time_s=0)


def cell_lines(table, row_id: str, column: str, ours: list[float] | None, status: str = "done",
               gains: list[float] | None = None, **extra) -> list[Line]:
    """One Line per metric of the table: ``ours[i]`` for metric i, the published value from the table."""
    row = table.row(row_id)
    return [Line(column, row.id, row.label, metric, table.published(row.id, column, metric.label),
                 [ours[i]] if ours else [], status, published_gain=0.07 if gains else None,
                 ours_gain=gains[i] if gains else None, **extra)
            for i, metric in enumerate(table.metrics)]


@pytest.fixture
def denoiser_out(tmp_path):
    """A denoiser-t2 CSV with two done cells (SASRec and its Denoiser row, whose claimed gain fails
    on Hit@10 only), a not-run cell and a cell run on substituted data; and a quick-budget CSV beside it."""
    table = load_table("denoiser-t2")
    sasrec = cell_lines(table, "sasrec", "ML", [0.75, 0.50])
    lines = [*sasrec,
             *cell_lines(table, "sasrec+denoiser", "ML", [0.74, 0.51], gains=[-0.0133, 0.02], compare_to="sasrec"),
             *cell_lines(table, "fpmc", "ML", None, status="not run"),
             *cell_lines(table, "caser", "ML", [0.9, 0.9], data_label="base/ml100k.yaml")]
    write_csv(table, lines, info(), tmp_path / "denoiser-t2.csv")
    write_csv(table, sasrec, info("quick"), tmp_path / "fearec-t2.quick.csv")
    return tmp_path


def test_index_lists_done_cells_ours_beside_published(denoiser_out):
    assert write_index(denoiser_out) == denoiser_out / INDEX_NAME
    text = (denoiser_out / INDEX_NAME).read_text()
    assert "| [denoiser-t2](#denoiser-t2) | 3 of 55 (1 on substituted data) | 0 / 1 |" in text  # of the paper's table
    assert "Rec-Denoiser (Chen et al., RecSys 2022) — Table 2" in text
    assert "| ML | SASRec | 0.7500 / 0.7434 (+0.9%) | 0.5000 / 0.5012 (-0.2%) | – |" in text
    assert "mixed (1/2) vs sasrec" in text
    assert "FPMC" not in text  # not run
    assert ("| ML (data: base/ml100k.yaml; *substituted data — not a reproduction*) | Caser | 0.9000 / 0.7213 "
            "(+24.8%) | 0.9000 / 0.4672 (+92.6%) | – |") in text
    assert "fearec-t2" not in text  # quick budget: not a reproduction


def test_index_has_one_line_per_table_and_no_negative_zero(tmp_path):
    table = load_table(TINY_TABLE)
    lines = cell_lines(table, "base", "Tiny", [9.9999, 4.9999, 0.99999])  # a hair below published
    write_csv(table, lines, info(), tmp_path / f"{table.name}.csv")
    text = (write_index(tmp_path)).read_text()
    assert f"| [{table.name}](#{table.name}) | 1 of 1 | – |" in text  # not a shipped table: the CSV's cells
    assert "| Tiny | Base | 10.00 / 10.00 (+0.0%) | 5.00 / 5.00 (+0.0%) | 1.00 / 1.00 (+0.0%) |" in text
    assert "-0.0%" not in text


def test_nothing_to_index_writes_nothing(tmp_path, capsys):
    assert write_index(tmp_path) is None
    assert main(["reproduce", "--index", "--out", str(tmp_path)]) == 0
    assert "no table CSV to index" in capsys.readouterr().out
    assert not (tmp_path / INDEX_NAME).exists()


def test_index_refuses_records_from_which_it_would_ignore(tmp_path, capsys):
    assert main(["reproduce", "--index", "--out", str(tmp_path), "--records-from", "docs/results"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--records-from does nothing with --index" in error
    assert not list(tmp_path.iterdir())


def test_reproduce_index_command_writes_the_index(denoiser_out, capsys):
    assert main(["reproduce", "--index", "--out", str(denoiser_out)]) == 0
    assert f"wrote {denoiser_out / INDEX_NAME}" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    ("dataset,row\nML,sasrec\n", ": not a `recbole-ext reproduce` table CSV (no column table, budget, label,"),
    (None, ", line 3: ours_mean 'abc' is not a number"),
])
def test_a_malformed_csv_is_a_one_line_error_naming_it(denoiser_out, content, message):
    path = denoiser_out / "denoiser-t2.csv"
    if content is None:  # the second data line (the Denoiser row's Hit@10) gets a bad ours_mean
        rows = path.read_text().splitlines()
        rows[2] = rows[2].replace(",0.5,", ",abc,", 1)
        content = "\n".join(rows) + "\n"
    path.write_text(content)
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}{message}")) as error:
        read_table_csv(path)
    assert "\n" not in str(error.value)


def test_index_links_the_subfolders_that_have_an_index(denoiser_out):
    (denoiser_out / "ml100k").mkdir()
    (denoiser_out / "ml100k" / "denoiser-t2.csv").write_text((denoiser_out / "denoiser-t2.csv").read_text())
    (denoiser_out / "empty").mkdir()
    write_index(denoiser_out / "ml100k")
    text = write_index(denoiser_out).read_text()
    assert "More tables, in folders with their own index: [ml100k/](ml100k/README.md)." in text


def test_reproduce_rewrites_the_index_after_each_table(tmp_path, capsys):
    assert main(["reproduce", str(TINY_TABLE), "--budget", "paper", "--report-only", "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / INDEX_NAME}" in capsys.readouterr().out
    text = (tmp_path / INDEX_NAME).read_text()
    assert "## tiny_table" in text and "No cell has our numbers yet." in text


def test_index_counts_the_signs_that_pass_welchs_test_and_reads_csvs_written_before_p_values(tmp_path):
    table = load_table("denoiser-t2")
    lines = [*cell_lines(table, "sasrec", "ML", [0.75, 0.50]),
             *cell_lines(table, "sasrec+denoiser", "ML", [0.76, 0.51], gains=[0.0133, 0.02], compare_to="sasrec")]
    lines[2].p_value, lines[3].p_value = 0.01, 0.40
    write_csv(table, lines, info(), tmp_path / "denoiser-t2.csv")
    assert "yes (2/2) vs sasrec; p < 0.05 on 1/2 |" in write_index(tmp_path).read_text()

    rows = (tmp_path / "denoiser-t2.csv").read_text().splitlines()  # as written before the p_value column
    assert rows[0].endswith(",p_value,published_consistent")
    (tmp_path / "denoiser-t2.csv").write_text("\n".join(row.rsplit(",", 2)[0] for row in rows) + "\n")
    text = write_index(tmp_path).read_text()
    assert "yes (2/2) vs sasrec |" in text


def test_the_refresh_after_a_table_leaves_out_csvs_it_cannot_index_and_names_them(tmp_path, capsys):
    """A user's own CSV beside the tables fails `--index` (one line naming it), but not the
    reproduction whose table was just written: the refresh leaves it out and says so."""
    (tmp_path / "my_notes.csv").write_text("a,b\n1,2\n")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'binary.csv'}: not a readable table CSV")):
        write_index(tmp_path)
    assert main(["reproduce", str(TINY_TABLE), "--budget", "paper", "--report-only", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / INDEX_NAME}" in out
    assert f"left out of the index: {tmp_path / 'my_notes.csv'}: not a `recbole-ext reproduce` table CSV" in out
    assert f"left out of the index: {tmp_path / 'binary.csv'}: not a readable table CSV" in out
    assert "## tiny_table" in (tmp_path / INDEX_NAME).read_text()


def test_a_table_written_in_a_subfolder_refreshes_the_parents_index_only_if_it_is_ours(denoiser_out, capsys,
                                                                                        monkeypatch):
    write_index(denoiser_out)
    sub = denoiser_out / "ml100k"
    assert main(["reproduce", str(TINY_TABLE), "--budget", "paper", "--report-only", "--out", str(sub)]) == 0
    assert f"wrote {denoiser_out / INDEX_NAME}" in capsys.readouterr().out
    assert "[ml100k/](ml100k/README.md)" in (denoiser_out / INDEX_NAME).read_text()
    # Run from above the folders with a relative --out: the parent's index names it relative too.
    monkeypatch.chdir(denoiser_out.parent)
    relative = Path(denoiser_out.name) / "ml100k"
    assert main(["reproduce", str(TINY_TABLE), "--budget", "paper", "--report-only", "--out", str(relative)]) == 0
    assert f"--index --out {denoiser_out.name}`" in (denoiser_out / INDEX_NAME).read_text()

    readme = "# A project's own README\n"
    (denoiser_out / INDEX_NAME).write_text(readme)  # someone else's README.md: left alone
    assert main(["reproduce", str(TINY_TABLE), "--budget", "paper", "--report-only", "--out", str(sub)]) == 0
    assert (denoiser_out / INDEX_NAME).read_text() == readme
