"""The published-table files: they parse, their cells are the specs' numbers, every row's config resolves."""
from __future__ import annotations

from pathlib import Path

import pytest

from recbole_ext.errors import ConfigError
from recbole_ext.repro.plan import plan_cell
from recbole_ext.repro.tables import all_tables, load_table, parse_table, table_names

# (table, row, column, metric) -> value, typed from ../shared/specs/<paper>.md (several cells per table)
SPEC_CELLS = {
    ("eulerformer-t2", "data", "ML-20M", "Avg. N"): 119.60,
    ("eulerformer-t2", "data", "Yelp2022", "# Users"): 9370,
    ("eulerformer-t3", "sasrec", "ML-1M", "NDCG@10"): 12.33,
    ("eulerformer-t3", "core+euler", "Amazon_Books", "MRR"): 3.08,
    ("eulerformer-t3", "fdsa", "ML-20M", "Recall@10"): 18.52,
    ("eulerformer-t3", "bert4rec+euler", "Yelp2022", "NDCG@10"): 2.56,
    ("eulerformer-t3", "sasrecf+euler", "ML-1M", "MRR"): 10.34,
    ("eulerformer-t4", "rope", "ML-1M", "Latency (s)"): 2.47,
    ("eulerformer-t4", "xlnet", "Amazon", "Latency (s)"): 24.39,
    ("eulerformer-t4", "sinusoidal", "Yelp2022", "Recall@10"): 4.61,
    ("eulerformer-t4", "alibi", "ML-20M", "MRR"): 8.05,
    ("eulerformer-t4", "t5", "ML-1M", "NDCG@10"): 12.09,
    ("eulerformer-t5", "learnable-pe", "ML-1M", "Recall@10"): 23.79,
    ("eulerformer-t5", "no-differential-rotation", "Yelp2022", "MRR"): 1.85,
    ("eulerformer-t5", "no-pcl", "Yelp2022", "NDCG@10"): 2.78,
    ("fearec-t1", "data", "ML-1M", "# Users"): 6041,
    ("fearec-t1", "data", "Clothing", "# Actions"): 278677,
    ("fearec-t1", "data", "Sports", "Sparsity (%)"): 99.95,
    ("fearec-t2", "coserec", "Clothing", "HR@10"): 0.0279,  # printed "0.279": the spec's typo
    ("fearec-t2", "fearec", "ML-1M", "NDCG@10"): 0.1861,
    ("fearec-t2", "duorec", "Beauty", "NDCG@5"): 0.0352,
    ("fearec-t2", "bpr", "Sports", "HR@10"): 0.0188,
    ("fearec-t2", "caser", "Beauty", "NDCG@10"): 0.0253,
    ("fearec-t3", "no-creg", "ML-1M", "HR@5"): 0.2028,
    ("fearec-t3", "no-std", "Clothing", "HR@5"): 0.0214,
    ("fearec-t3", "no-fda", "Beauty", "NDCG@5"): 0.0361,
    ("denoiser-t1", "data", "Steam", "#Users"): 114796,
    ("denoiser-t2", "sasrec+denoiser", "Steam", "Hit@10"): 0.8345,
    ("denoiser-t2", "tisasrec", "Beauty", "NDCG@10"): 0.2911,
    ("denoiser-t2", "ssept+denoiser", "Games", "NDCG@10"): 0.5152,
    ("denoiser-t2", "fpmc", "ML", "Hit@10"): 0.7478,
    ("denoiser-t2", "bert4rec+denoiser", "Movies&TV", "NDCG@10"): 0.4875,
    ("linrec-t1", "data", "Gowalla", "# Items"): 164533,
    ("linrec-t2", "core+linrec", "ML-1M", "MRR"): 0.2792,
    ("linrec-t2", "sasrecf", "Gowalla", "NDCG@10"): 0.6880,
    ("linrec-t2", "bert4rec", "ML-1M", "Recall@10"): 0.6975,
    ("linrec-t3", "lt", "ML-1M", "MRR"): 0.3359,
    ("linrec-t3", "ea", "Gowalla", "NDCG@10"): 0.7198,
    ("linrec-t4", "fdsa", "ML-1M", "GPU memory (G)"): 35.22,
    ("linrec-t4", "sasrec+linrec", "ML-1M", "Train (s/epoch)"): 44,
    ("linrec-t4", "core", "Gowalla", "Eval (s/epoch)"): 570,
    ("cape-t2", "din-cape", "AmazonElectronics", "gAUC"): 0.885698,
    ("cape-t2", "sasrec-cope", "KuaiVideo", "logloss"): 0.433345,
    ("cape-t2", "dmin-none", "KuaiVideo", "AUC"): 0.743807,
    ("cape-t3", "16-cape", "Books", "N@10"): 4.60047,
    ("cape-t3", "8-rope", "Books", "R@50"): 12.71685,
    ("cape-t3", "2-naive", "Books", "R@5"): 5.46138,
}
REQUIRED_TABLES = {"eulerformer-t3", "eulerformer-t4", "eulerformer-t5", "fearec-t1", "fearec-t2", "fearec-t3",
                   "denoiser-t2", "linrec-t2", "linrec-t3", "linrec-t4", "cape-t2", "cape-t3"}


def test_every_required_table_ships_and_parses():
    assert REQUIRED_TABLES <= set(table_names())
    for table in all_tables():
        assert table.rows and table.columns and table.metrics, table.name


@pytest.mark.parametrize("cell", sorted(SPEC_CELLS), ids="/".join)
def test_published_cell_matches_the_spec(cell):
    table_name, row, column, metric = cell
    assert load_table(table_name).published(row, column, metric) == pytest.approx(SPEC_CELLS[cell], abs=1e-9)


def _gain(table, row, base, column, metric):
    return 100 * (table.published(row, column, metric) / table.published(base, column, metric) - 1)


def test_recomputed_gains_reproduce_the_typos_the_specs_found():
    euler = load_table("eulerformer-t3")  # printed +4.95%, the spec recomputes +4.61%
    assert _gain(euler, "bert4rec+euler", "bert4rec", "ML-1M", "NDCG@10") == pytest.approx(4.61, abs=0.005)
    denoiser = load_table("denoiser-t2")  # printed +5.05%, recomputed +8.05%
    assert _gain(denoiser, "sasrec+denoiser", "sasrec", "Steam", "Hit@10") == pytest.approx(8.05, abs=0.005)
    linrec = load_table("linrec-t3")  # printed range 9.6%~28.0%; over LT the MRR gain is 28.0%
    assert _gain(linrec, "linrec", "lt", "ML-1M", "MRR") == pytest.approx(28.0, abs=0.05)
    errata = {(e["row"], e["column"]) for t in (euler, denoiser, linrec, load_table("fearec-t2")) for e in t.errata}
    assert {("bert4rec+euler", "ML-1M"), ("sasrec+denoiser", "Steam"), ("coserec", "Clothing")} <= errata


def test_statistics_tables_agree_with_the_dataset_presets():
    from recbole_ext.data.presets import PRESETS

    checked = 0
    for table in all_tables():
        if table.kind != "statistics":
            continue
        labels = [m.key for m in table.metrics]
        for column in table.columns:
            if not column.preset:
                continue
            printed = dict(zip(labels, table.rows[0].published[column.label]))
            preset = PRESETS[column.preset].published
            for key in ("users", "items", "interactions"):
                if key in printed:
                    assert printed[key] == getattr(preset, key), (table.name, column.label, key)
                    checked += 1
    assert checked >= 20


def test_bad_table_files_fail_with_the_entry_at_fault(tmp_path):
    base = {"table": "t", "paper": "p", "title": "x", "source": "s", "protocol": {"evaluation": "full"},
            "metrics": {"NDCG@10": "ndcg@10"}, "columns": {"A": {"config": "a.yaml"}},
            "rows": [{"id": "r", "model": "SeqTransformer", "published": {"A": [1.0]}}]}
    parse_table(base, tmp_path / "t.yaml")
    broken = {**base, "rows": [{"id": "r", "model": "SeqTransformer", "published": {"A": [1.0, 2.0]}}]}
    with pytest.raises(ConfigError, match="row 'r': column 'A' has 2 values for 1 metrics"):
        parse_table(broken, tmp_path / "t.yaml")
    broken = {**base, "rows": [{"id": "r", "model": "SeqTransformer", "compare_to": "nope"}]}
    with pytest.raises(ConfigError, match="compare_to 'nope'"):
        parse_table(broken, tmp_path / "t.yaml")
    with pytest.raises(ConfigError, match="protocol.evaluation"):
        parse_table({**base, "protocol": {"evaluation": "sampled"}}, tmp_path / "t.yaml")
    with pytest.raises(ConfigError, match="unknown key 'colums'"):
        parse_table({**base, "colums": {}}, tmp_path / "t.yaml")


def test_a_statistics_cell_without_files_names_the_conversion_command_once(tmp_path, monkeypatch):
    """The missing-data line of a statistics cell is the files and the exact command, nothing else."""
    monkeypatch.chdir(tmp_path)  # the column's config reads dataset_atomic/ here: nothing converted
    table = load_table("denoiser-t1")
    column = next(c for c in table.columns if c.preset == "denoiser-beauty")
    cell = plan_cell(table, table.rows[0], column, [2020], "paper", tmp_path, "cpu")
    assert cell.state == "missing-data"
    assert cell.reason == ("dataset_atomic/denoiser-beauty/denoiser-beauty.inter: no such file (nor benchmark files "
                           "denoiser-beauty.<split>.inter); create them with: recbole-ext data convert --preset "
                           "denoiser-beauty --format amazon-ratings|atomic --input ratings_Beauty.csv "
                           "(see configs/datasets/denoiser-beauty.yaml and README 'Datasets')")


_MEMO: dict = {}  # dataset checks shared by all resolution tests (ML-1M is read once)


def _row_cases():
    for table in all_tables():
        if table.kind == "statistics":
            continue
        for row in table.rows:
            yield pytest.param(table.name, row.id, id=f"{table.name}/{row.id}")


@pytest.mark.parametrize("table_name,row_id", list(_row_cases()))
def test_every_row_config_resolves_once_its_model_exists(table_name, row_id, tmp_path):
    """Strict as models land: only rows marked pending or whose model/part is not registered yet skip."""
    table = load_table(table_name)
    row = table.row(row_id)
    if row.pending:
        pytest.skip(f"pending: {row.pending}")
    column = next((c for c in table.columns if c.config and (not row.published or c.label in row.published)), None)
    use_data = None
    if column is None:  # no dataset of this table exists here: resolve on ml-100k (RecBole ships it)
        column = table.columns[0]
        use_data = {column.label: "base/ml100k.yaml"}
    cell = plan_cell(table, row, column, [2020], "paper", Path(tmp_path), "cpu", use_data, _MEMO)
    if cell.state == "pending":
        pytest.skip(cell.reason)
    assert cell.state in ("runnable", "missing-data"), f"{cell.state}: {cell.reason}"


def test_bf16_leaves_the_models_it_slows_on_a_cpu_in_fp32(tmp_path):
    """``--bf16`` would make RecBole's Caser 11x slower on a CPU: its cells plan fp32 runs there (with
    the bf16 key still standing in), while a GPU's plan and the other rows take bf16."""
    from recbole_ext.repro.plan import plan_table

    table = load_table("denoiser-t2")
    plan = dict(datasets=["ML"], models=["caser", "sasrec"], use_data={"ML": "base/ml100k.yaml"}, budget="quick",
                bf16=True)
    on_cpu = {cell.row.id: cell.runs[0] for cell in plan_table(table, tmp_path, device="cpu", **plan)}
    assert not on_cpu["caser"].values.get("bf16") and on_cpu["sasrec"].values["bf16"] is True
    assert "cpu with bf16 autocast" in on_cpu["caser"].keys_elsewhere
    on_gpu = {cell.row.id: cell.runs[0] for cell in plan_table(table, tmp_path, device="cuda:GPU", **plan)}
    assert on_gpu["caser"].values["bf16"] is True


def test_bf16_on_a_cpu_says_which_rows_stay_in_fp32(tmp_path, capsys, monkeypatch):
    from recbole_ext.cli import main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    argv = ["reproduce", "denoiser-t2", "--datasets", "ML", "--use-data", "ML=base/ml100k.yaml", "--budget", "quick",
            "--out", str(tmp_path), "--dry-run", "--bf16", "--models"]
    assert main([*argv, "caser", "sasrec"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "--bf16 does not apply" in line]
    assert notes == ["note: --bf16 does not apply to the Caser row(s) here, which train in fp32: bf16 autocast "
                     "slows Caser down on a CPU (docs/performance.md)"]
    assert main([*argv, "sasrec"]) == 0
    assert "--bf16 does not apply" not in capsys.readouterr().out


def test_a_selection_name_that_matches_nothing_is_an_error_even_beside_good_ones():
    """``--models Casr SASRec`` must not quietly run SASRec alone: the typo is named, with the closest
    row and the table's rows; the same for ``--datasets``."""
    from recbole_ext.repro.plan import select

    table = load_table("fearec-t2")
    with pytest.raises(ConfigError, match=r"--models Casr: matches nothing in table fearec-t2 \(did you mean 'Caser'\?\); "
                                          r"it has: BPR-MF, GRU4Rec, Caser, "):
        select(table, models=["Casr", "SASRec"])
    with pytest.raises(ConfigError, match=r"--datasets Beuty: .*did you mean 'Beauty'.*it has: Beauty, Clothing"):
        select(table, datasets=["Beuty"], models=["sasrec"])
    rows, columns = select(table, datasets=["beauty", "fearec-sports"], models=["SASRec", "duorec"])
    assert [r.id for r in rows] == ["sasrec", "duorec"] and [c.label for c in columns] == ["Beauty", "Sports"]


def test_use_data_for_one_row_overrides_the_columns_substitute_for_that_row_alone(tmp_path):
    """Rows that read item features take a config that loads them (``COLUMN:ROW=CONFIG``); the
    others keep the column's substitute, so their cache keys (and finished runs) stay as they were."""
    from recbole_ext.repro.cli import _use_data
    from recbole_ext.repro.plan import plan_table

    table = load_table("linrec-t2")
    column_only = _use_data(["ML-1M=base/ml100k.yaml"])
    with_rows = _use_data(["ML-1M=base/ml100k.yaml", "ML-1M:FDSA=base/ml100k_items.yaml",
                           "ML-1M:sasrecf+linrec=base/ml100k_items.yaml"])
    plan = dict(datasets=["ML-1M"], models=["sasrec", "fdsa", "sasrecf+linrec"], budget="quick", device="cpu")
    before = {c.row.id: c for c in plan_table(table, tmp_path, use_data=column_only, memo=_MEMO, **plan)}
    after = {c.row.id: c for c in plan_table(table, tmp_path, use_data=with_rows, memo=_MEMO, **plan)}
    assert before["fdsa"].state == "error" and "load_col" in before["fdsa"].reason
    assert after["fdsa"].state == after["sasrecf+linrec"].state == "runnable"
    assert after["fdsa"].data_label == "base/ml100k_items.yaml" and after["sasrec"].data_label == "base/ml100k.yaml"
    assert after["sasrec"].runs[0].key == before["sasrec"].runs[0].key


@pytest.mark.parametrize("entries,message", [
    (["ML-1M:FDSB=base/ml100k_items.yaml"], r"--use-data ML-1M:FDSB=\.\.\.: column ML-1M of table linrec-t2 has "
                                             r"no row 'FDSB' \(did you mean 'FDSA'\?\); it has: BERT4Rec, "),
    (["Gowala:fdsa=base/ml100k_items.yaml"], r"table linrec-t2 has no column 'Gowala'"),
])
def test_use_data_for_a_row_or_column_that_is_not_there_names_it(entries, message, tmp_path):
    from recbole_ext.repro.cli import _use_data
    from recbole_ext.repro.plan import plan_table

    with pytest.raises(ConfigError, match=message):
        plan_table(load_table("linrec-t2"), tmp_path, use_data=_use_data(entries), device="cpu", memo=_MEMO)


@pytest.mark.parametrize("entry", ["ML-1M:=base/ml100k.yaml", "ML-1M", "=base/ml100k.yaml"])
def test_a_malformed_use_data_entry_is_one_clear_error(entry):
    from recbole_ext.repro.cli import _use_data

    with pytest.raises(ConfigError, match=r"expected COLUMN=CONFIG or COLUMN:ROW=CONFIG"):
        _use_data([entry])
    with pytest.raises(ConfigError, match=r"--use-data ML-1M: given twice"):
        _use_data(["ML-1M=base/ml100k.yaml", "ML-1M=base/ml100k_items.yaml"])
