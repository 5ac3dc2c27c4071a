"""``--format reczoo-ctr`` (CAPE Table 2's AmazonElectronics_x1): benchmark files, the item file, the
meta file, every malformed input as one line, ``data stats``, the run check and one DINPos epoch."""
from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from recbole_ext.cli import main
from recbole_ext.config import resolve
from recbole_ext.data import require_atomic_files
from recbole_ext.data.atomic import check_atomic_file
from recbole_ext.data.converters import convert
from recbole_ext.data.reczoo import RECZOO_HISTORY_CAP
from recbole_ext.errors import DataFormatError, DatasetMissingError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "datasets" / "cape-electronics.yaml"
HEADER = "label,user_id,item_id,cate_id,item_history,cate_history"
# Each user's reviews in order. u1 has 106: its last rows' histories exceed the cap of 100.
# u9 has two: no training row (its only prefix is the test row), as reczoo's one-row users.
SEQUENCES = {"u1": list(range(1, 107)), "u2": [3, 5, 7, 9, 11, 13], "u3": [2, 4, 6, 8, 10], "u4": [12, 14, 1],
             "u9": [20, 21]}
TINY_RUN = ["epochs=1", "train_batch_size=64", "eval_batch_size=16", "show_progress=false", "state=WARNING",
            "use_gpu=false"]
TINY_DIN = ["model=DINPos", "embedding_size=8", "mlp_hidden_size=[16,16]", "target_attention_softmax=true",
            "position={type: cape, pos_dim: 4}", *TINY_RUN]
# CAPE Table 2's other rows on the same files: RecBole's DIEN, DIENPos, DMINPos, SASRec and BST as CTR models.
TINY_MODELS = {
    "DINPos": TINY_DIN,
    "DIEN": ["model=DIEN", "embedding_size=8", "mlp_hidden_size=[16,16]", *TINY_RUN],
    "DIENPos": ["model=DIENPos", "embedding_size=8", "mlp_hidden_size=[16,16]", "position=cope", *TINY_RUN],
    "DMINPos": ["model=DMINPos", "embedding_size=8", "mlp_hidden_size=[16,16]", "n_heads=2",
                "position={type: cape, pos_dim: 4}", *TINY_RUN],
    "SASRec-CTR": ["model=SeqTransformer", "backbone={type: ctr, head_hidden: [16]}", "hidden_size=16",
                   "inner_size=16", "MAX_ITEM_LIST_LENGTH=101", "position={type: cape, pos_dim: 4}", *TINY_RUN],
    "BST": ["model=SeqTransformer", "backbone={type: ctr, causal: false, pooling: mean, head_hidden: [16]}",
            "n_layers=1", "hidden_size=16", "inner_size=16", "MAX_ITEM_LIST_LENGTH=101", "position=rope", *TINY_RUN],
}


def category(item) -> str:
    return f"c{int(item) % 4}"


def din_rows(user: str, sequence: list[int]) -> tuple[list[str], list[str]]:
    """reczoo's (DIN's) construction: every prefix predicts the next review, as a positive row and a
    row with a sampled negative; the last prefix is the test pair."""
    train, test = [], []
    for i in range(1, len(sequence)):
        history = sequence[:i]
        items, cates = "^".join(map(str, history)), "^".join(category(x) for x in history)
        negative = 200 + (sequence[i] * 7) % 50
        rows = [f"1,{user},{sequence[i]},{category(sequence[i])},{items},{cates}",
                f"0,{user},{negative},{category(negative)},{items},{cates}"]
        (test if i == len(sequence) - 1 else train).extend(rows)
    return train, test


def write_pair(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    train, test = [HEADER], [HEADER]
    for user, sequence in SEQUENCES.items():
        user_train, user_test = din_rows(user, sequence)
        train += user_train
        test += user_test
    (directory / "train.csv").write_text("\n".join(train) + "\n")
    (directory / "test.csv").write_text("\n".join(test) + "\n")
    return directory / "train.csv", directory / "test.csv"


def read_atomic(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
    frame.columns = [c.split(":")[0] for c in frame.columns]
    return frame


@pytest.fixture
def source(tmp_path) -> tuple[Path, Path]:
    return write_pair(tmp_path / "reczoo")


def test_conversion_writes_benchmark_files_item_categories_and_meta(source, tmp_path):
    result = convert("reczoo-ctr", list(source), "ae", tmp_path / "out", preset_name="cape-electronics")
    folder = tmp_path / "out" / "ae"
    assert sorted(p.name for p in folder.iterdir()) == ["ae.item", "ae.meta.json", "ae.test.inter", "ae.train.inter"]
    for split, csv_path in zip(("train", "test"), source):
        path = folder / f"ae.{split}.inter"
        assert path.read_text().split("\n")[0] == "label:float\tuser_id:token\titem_id:token\titem_id_list:token_seq"
        assert check_atomic_file(path).ok
        written, original = read_atomic(path), pd.read_csv(csv_path, dtype=str)
        assert len(written) == len(original)
        assert written[["label", "user_id", "item_id"]].values.tolist() == original[["label", "user_id", "item_id"]].values.tolist()
        expected = [" ".join(h.split("^")[:RECZOO_HISTORY_CAP]) for h in original["item_history"]]
        assert written["item_id_list"].tolist() == expected  # the FIRST 100 (FuxiCTR post truncation)
    test = read_atomic(folder / "ae.test.inter")
    u1 = test[test["user_id"] == "u1"]["item_id_list"].iloc[0].split()
    assert len(u1) == 100 and u1 == [str(i) for i in range(1, 101)]
    item = read_atomic(folder / "ae.item")
    assert list(item.columns) == ["item_id", "cate_id"] and item["item_id"].is_unique
    negatives = {str(200 + (s[i] * 7) % 50) for s in SEQUENCES.values() for i in range(1, len(s))}
    assert set(item["item_id"]) == {str(i) for s in SEQUENCES.values() for i in s} | negatives
    assert all(cate == category(i) for i, cate in zip(item["item_id"], item["cate_id"]))

    meta = json.loads((folder / "ae.meta.json").read_text())
    assert meta == result.meta and meta["format"] == "reczoo-ctr" and meta["preset"] == "cape-electronics"
    assert [s["sha256"] for s in meta["source"]] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in source]
    counts = meta["counts"]["written"]
    train_rows = sum(2 * (len(s) - 2) for s in SEQUENCES.values())
    assert counts["rows"] == {"train": train_rows, "test": 2 * len(SEQUENCES)}
    assert counts["users"] == len(SEQUENCES) and counts["items"] == len(item)
    assert counts["reviews"] == sum(len(s) for s in SEQUENCES.values())
    # u1's train histories of 101..104 ids (a positive and a negative row each) and its test pair (105)
    assert meta["history"]["max_length"] == RECZOO_HISTORY_CAP
    assert meta["history"]["truncated_rows"] == {"train": 8, "test": 2}
    assert meta["files"] == ["ae.train.inter", "ae.test.inter", "ae.item"]


def _rewrite(path: Path, line: int, new: str) -> None:
    lines = path.read_text().split("\n")
    lines[line - 1] = new
    path.write_text("\n".join(lines))


def _line(path: Path, line: int) -> str:
    return path.read_text().split("\n")[line - 1]


@pytest.mark.parametrize(("which", "line", "edit", "pattern"), [
    (0, 1, lambda text: text.removesuffix(",cate_history"), r"train.csv:1: the header lacks cate_history"),
    (0, 3, lambda text: "x" + text[1:], r"train.csv:3: label 'x' is not a number"),
    (1, 2, lambda text: "2" + text[1:], r"test.csv:2: label '2' is not 0 or 1"),
    (0, 4, lambda text: text.rsplit("^", 1)[0], r"train.csv:4: item_history has 2 ids but cate_history has 1"),
    (0, 5, lambda text: text + ",extra", r"train.csv:5: 7 fields, the header has 6"),
    (0, 5, lambda text: text.rsplit(",", 1)[0], r"train.csv:5: item_history has 2 ids but cate_history has 0"),
    (0, 6, lambda text: text.replace(",1^", ",1^^", 1), r"train.csv:6: empty id in item_history"),
    (0, 6, lambda text: text.replace(",u1,", ",u 1,", 1), r"train.csv:6: user_id 'u 1' contains whitespace"),
    (1, 3, lambda text: ",".join(text.split(",")[:4] + ["", ""]), r"test.csv:3: empty item_history"),
    # u2's test history 3^5^7^9^11: item 7 is 'c3' everywhere else
    (1, 4, lambda text: text.replace("^c3^", "^c0^", 1), r"test.csv:4: item '7' has category 'c0', but 'c3' at .*train.csv:\d+"),
])
def test_malformed_input_is_one_line_naming_file_and_line(source, tmp_path, which, line, edit, pattern):
    path = source[which]
    _rewrite(path, line, edit(_line(path, line)))
    with pytest.raises(DataFormatError) as error:
        convert("reczoo-ctr", list(source), "ae", tmp_path / "out")
    message = str(error.value)
    assert "\n" not in message and re.search(pattern, message), message
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # nothing written


def test_wrong_inputs_and_filters_are_refused(source, tmp_path):
    train, test = source
    with pytest.raises(DataFormatError, match=r"needs both train.csv and test.csv"):
        convert("reczoo-ctr", [train], "ae", tmp_path / "out")
    other = tmp_path / "valid.csv"
    other.write_text(train.read_text())
    with pytest.raises(DataFormatError, match=r"valid.csv: --format reczoo-ctr takes train.csv and test.csv"):
        convert("reczoo-ctr", [train, test, other], "ae", tmp_path / "out")
    with pytest.raises(DataFormatError, match=r"already split into train/test and takes no filters"):
        convert("reczoo-ctr", [train, test], "ae", tmp_path / "out", overrides={"user_min": 5})
    with pytest.raises(DataFormatError, match=r"preset 'fearec-beauty' is defined for --format s3rec or atomic"):
        convert("reczoo-ctr", [train, test], "ae", tmp_path / "out", preset_name="fearec-beauty")


def test_cli_convert_and_stats_count_all_splits(source, tmp_path, capsys):
    code = main(["data", "convert", "--preset", "cape-electronics", "--format", "reczoo-ctr", "--input", *map(str, source),
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "cape-electronics.train.inter, cape-electronics.test.inter, cape-electronics.item" in out
    code = main(["data", "stats", "cape-electronics", "--data-path", str(tmp_path)])
    out = capsys.readouterr().out
    users, reviews = len(SEQUENCES), sum(len(s) for s in SEQUENCES.values())
    items = len(read_atomic(tmp_path / "cape-electronics" / "cape-electronics.item"))
    assert code == 0 and "cape-electronics.{train,test}.inter" in out
    assert re.search(rf"users\s+{users}\s+192,403\s+{users - 192403:+,}", out)
    assert re.search(rf"items\s+{items}\s+63,001\s+{items - 63001:+,}", out)
    assert re.search(rf"reviews\s+{reviews}\s+1,689,188", out)  # the paper's "samples" are reviews
    assert f"rows per split: train {sum(2 * (len(s) - 2) for s in SEQUENCES.values())}, test {2 * users}" in out
    assert "avg_length" not in out and "sparsity" not in out  # per-user counts of CTR rows mean nothing


def test_run_check_needs_no_timestamp_and_names_the_converter(source, tmp_path):
    resolved = resolve(CONFIG, ["model=DINPos", f"data_path={tmp_path}"])
    with pytest.raises(DatasetMissingError) as error:
        require_atomic_files(resolved)
    assert ("recbole-ext data convert --preset cape-electronics --format reczoo-ctr --input train.csv test.csv"
            in str(error.value))
    convert("reczoo-ctr", list(source), "cape-electronics", tmp_path, preset_name="cape-electronics")
    require_atomic_files(resolved)  # order TO, no timestamp column: fine for benchmark files


@pytest.mark.parametrize("model", list(TINY_MODELS))
def test_table_2_models_train_and_test_on_every_test_row(model, source, in_tmp, monkeypatch):
    from recbole.evaluator.collector import Collector

    from recbole_ext.runner import run

    convert("reczoo-ctr", list(source), "cape-electronics", in_tmp / "dataset_atomic", preset_name="cape-electronics")
    evaluated = []  # (rows, positives) of each evaluation: valid, then test
    get_data_struct = Collector.get_data_struct

    def counting(self):
        struct = get_data_struct(self)
        labels = struct.get("data.label")
        evaluated.append((len(labels), int(labels.sum())))
        return struct

    monkeypatch.setattr(Collector, "get_data_struct", counting)
    result = run(CONFIG, TINY_MODELS[model])
    assert set(result.test_result) == {"samplegauc", "auc", "logloss"}  # the dataset config's metrics
    assert all(math.isfinite(value) for value in result.test_result.values())
    test_rows = len(pd.read_csv(source[1]))
    assert evaluated[-1] == (test_rows, test_rows // 2)  # every test row, each user's positive and negative
    assert evaluated[0] == evaluated[-1]  # validation = the test file
