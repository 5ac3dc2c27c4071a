"""``recbole-ext data ...`` and the check ``run`` does first; real-data presets when ../shared is present."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from recbole_ext.cli import main
from recbole_ext.config import resolve
from recbole_ext.data import require_atomic_files
from recbole_ext.errors import DataFormatError

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures"
RAW = ROOT.parent / "shared" / "datasets" / "raw"


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_check_ok_and_every_failure_one_line(capsys, tmp_path):
    code, out, err = cli(capsys, "data", "check", ROOT / "dataset_atomic" / "tiny-seq")
    assert code == 0 and "tiny-seq.inter: ok (5,116 rows;" in out and "tiny-seq.item: ok" in out
    bad = tmp_path / "b.inter"
    bad.write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\tx\n1\t2\n")
    code, out, err = cli(capsys, "data", "check", bad)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2
    assert re.fullmatch(r"recbole-ext: error: .*b.inter:2: column 'timestamp' \(float\): 'x' is not a number", lines[0])
    assert re.fullmatch(r"recbole-ext: error: .*b.inter:3: 2 columns, the header has 3 .*", lines[1])


def test_convert_then_stats_with_preset(capsys, tmp_path):
    code, out, _ = cli(capsys, "data", "convert", "--format", "s3rec", "--input", FIX / "s3rec" / "Tiny.txt",
                       "--preset", "fearec-beauty", "--name", "tb", "--out", tmp_path)
    assert code == 0 and "timestamps: synthetic" in out and "written: " in out
    code, out, _ = cli(capsys, "data", "stats", "tb", "--data-path", tmp_path)
    assert code == 0 and "preset fearec-beauty" in out
    row = re.search(r"users\s+(\d+)\s+22,363\s+(-[\d,]+)", out)
    assert row and int(row.group(1)) - 22363 == int(row.group(2).replace(",", ""))
    code, out, _ = cli(capsys, "data", "stats", tmp_path / "tb")  # a folder works too; no preset given
    assert code == 0 and "preset fearec-beauty" in out


@pytest.mark.parametrize(("argv", "pattern"), [
    (["data", "convert", "--format", "s3rec", "--input", "nope.txt", "--name", "x"], r"nope.txt: no such file"),
    (["data", "convert", "--format", "sasrec", "--input", FIX / "sasrec" / "tiny.txt", "--preset", "fearec-beuty"],
     r"unknown dataset preset 'fearec-beuty' \(did you mean 'fearec-beauty'"),
    (["data", "convert", "--format", "ml-seq", "--input", FIX / "ml-seq" / "tiny_seq.txt", "--preset", "eulerformer-ml1m"],
     r"preset 'eulerformer-ml1m' keeps ratings >= 3 .*no ratings"),
    (["data", "convert", "--format", "sasrec", "--input", FIX / "sasrec" / "tiny.txt", "--preset", "fearec-beauty"],
     r"preset 'fearec-beauty' is defined for --format s3rec or atomic, not sasrec"),
    (["data", "stats", "missing"], r"missing/missing.inter: no such file"),
])
def test_data_errors_are_one_line_exit_2(capsys, tmp_path, monkeypatch, argv, pattern):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("recbole-ext: error: "), err
    assert re.search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "dataset_atomic").exists() or not any(
        p for p in (tmp_path / "dataset_atomic").iterdir() if not p.name.startswith("."))


def test_presets_listing(capsys):
    code, out, _ = cli(capsys, "data", "presets")
    assert code == 0 and re.search(r"fearec-ml1m .* 6,040 / 3,416 / 999,611", out)


# --- the check `run` does before RecBole loads data ---

def _resolved(tmp_path, text):
    (tmp_path / "c.yaml").write_text(text)
    return resolve(tmp_path / "c.yaml")


def test_run_check_rejects_malformed_inter_before_recbole(tmp_path):
    (tmp_path / "d" / "bad").mkdir(parents=True)
    (tmp_path / "d" / "bad" / "bad.inter").write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\n")
    resolved = _resolved(tmp_path, f"model: SASRec\ndataset: bad\ndata_path: {tmp_path / 'd'}\n"
                                   "load_col: {inter: [user_id, item_id, timestamp]}\n")
    with pytest.raises(DataFormatError, match=r"bad.inter:2: 2 columns, the header has 3"):
        require_atomic_files(resolved)


def _dataset_t(tmp_path) -> tuple[Path, str]:
    """A one-row dataset 't' with timestamps, and the config lines that point a run at it."""
    data = tmp_path / "d" / "t"
    data.mkdir(parents=True)
    (data / "t.inter").write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t2\t3\n")
    return data, f"model: SASRec\ndataset: t\ndata_path: {tmp_path / 'd'}\n"


def test_run_check_needs_the_time_field_for_order_TO(tmp_path):
    data, base = _dataset_t(tmp_path)
    resolved = _resolved(tmp_path, base)
    with pytest.raises(DataFormatError, match=r"load_col does not load 'timestamp' from t.inter"):
        require_atomic_files(resolved)
    (data / "t.inter").write_text("user_id:token\titem_id:token\n1\t2\n")
    resolved = _resolved(tmp_path, base + "load_col: ~\n")
    with pytest.raises(DataFormatError, match=r"t.inter:1: eval_args order TO sorts by 'timestamp', which the header lacks"):
        require_atomic_files(resolved)


def test_run_checks_a_loaded_item_file(tmp_path):
    data, base = _dataset_t(tmp_path)
    (data / "t.item").write_text("item_id:token\tgenre:tokenseq\n2\ta\n")
    require_atomic_files(_resolved(tmp_path, base + "load_col: {inter: [user_id, item_id, timestamp]}\n"))
    with pytest.raises(DataFormatError, match=r"t.item:1: header column 2 'genre' has unknown type 'tokenseq'"):
        require_atomic_files(_resolved(tmp_path, base + "load_col: {inter: [user_id, item_id, timestamp], item: [item_id, genre]}\n"))


def test_run_on_the_shipped_fixture_loads_timestamps_and_trains(capsys, in_tmp):
    import shutil

    shutil.copytree(ROOT / "dataset_atomic" / "tiny-seq", in_tmp / "dataset_atomic" / "tiny-seq")
    code, out, err = cli(capsys, "run", "--config", ROOT / "configs" / "datasets" / "tiny-seq.yaml",
                         "--set", "model=SASRec", "--set", "epochs=1", "--set", "state=WARNING",
                         "--set", "use_gpu=false", "--set", "output_dir=runs")
    assert code == 0, err
    assert "test: recall@10=" in out
    log = next((in_tmp / "runs").iterdir()) / "run.log"
    config = (log.parent / "config.yaml").read_text()
    assert "timestamp" in config


# --- real data (read-only copies in ../shared/datasets/raw; skipped where absent) ---

needs_raw = pytest.mark.skipif(not RAW.is_dir(), reason="../shared/datasets/raw not present")


@needs_raw
@pytest.mark.parametrize(("preset", "inputs", "expected"), [
    # FEARec Table 1 (specs/fearec.md §3): exact.
    ("fearec-beauty", ["Amazon_Beauty/Beauty.txt", "Amazon_Beauty/Beauty_item2attributes.json"], (22363, 12101, 198502)),
    ("fearec-sports", ["Amazon_Sports_and_Outdoors/Sports_and_Outdoors_with_time_intervals.txt"], (35598, 18357, 296337)),
    ("fearec-clothing", ["Amazon_Clothing_Shoes_and_Jewelry/Clothing.txt"], (39387, 23033, 278677)),
])
def test_real_amazon_presets_reproduce_published_counts(tmp_path, preset, inputs, expected):
    result = convert_real("s3rec", preset, inputs, tmp_path)
    written = result.meta["counts"]["written"]
    assert (written["users"], written["items"], written["interactions"]) == expected


@needs_raw
def test_real_ml1m_presets(tmp_path):
    seq = "ml-1m/ml-1m_seq_from_pkl.txt"
    fearec = convert_real("ml-seq", "fearec-ml1m", [seq, "ml-1m/movies.dat"], tmp_path).meta["counts"]["written"]
    # FEARec Table 1 prints 6,041 / 3,417 with [PAD]: 6,040 / 3,416 / 999,611 (specs/fearec.md §3).
    assert (fearec["users"], fearec["items"], fearec["interactions"]) == (6040, 3416, 999611)
    linrec = convert_real("ml-seq", "linrec-ml1m", [seq, "ml-1m/movies.dat"], tmp_path)
    written = linrec.meta["counts"]["written"]
    # LinRec Table 1: 6,041 users / 3,884 items ([PAD] and the whole .item file) / 1,000,209.
    assert (written["users"], written["interactions"], linrec.meta["item_rows"]) == (6040, 1000209, 3883)


def convert_real(fmt, preset, inputs, out):
    from recbole_ext.data.converters import convert

    return convert(fmt, [RAW / p for p in inputs], preset, out, preset_name=preset)


def test_the_clis_format_and_kcore_choices_are_the_converters():
    """``data/cli.py`` repeats them to stay free of pandas; they must not drift apart."""
    from recbole_ext.data import cli, converters, filters

    assert cli.FORMATS == converters.FORMATS and cli.KCORE_KINDS == filters.KCORE_KINDS
