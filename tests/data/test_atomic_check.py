"""The atomic-file checker: each kind of malformed file gives a one-line FILE:LINE error, and
whatever bytes it is given it never raises (property-based)."""
from __future__ import annotations

import csv
import json
import os
import re

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recbole_ext.data import atomic
from recbole_ext.data.atomic import check_atomic_file, check_atomic_file_cached
from recbole_ext.errors import DataFormatError

GOOD = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t10\t4\t100\n1\t11\t5\t101\n"


def write(tmp_path, text, name="d.inter", mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_good_file_passes(tmp_path):
    report = check_atomic_file(write(tmp_path, GOOD))
    assert report.ok and report.rows == 2 and report.column_names() == ["user_id", "item_id", "rating", "timestamp"]


@pytest.mark.parametrize(("text", "pattern"), [
    ("", r"d.inter: empty file"),
    ("user_id:token\titem_id:token", r"d.inter:1: the header line has no newline"),
    ("user_id:token\titem_id:token\n", r"d.inter: no interaction rows"),
    ("user_id\titem_id:token\n1\t2\n", r"d.inter:1: header column 1 'user_id' is not 'name:type'"),
    ("user_id:token,item_id:token\n1,2\n", r"d.inter:1: header column 1 .* looks like another separator"),
    ("user_id:token\titem_id:tokn\n1\t2\n", r"d.inter:1: header column 2 'item_id' has unknown type 'tokn'"),
    ("user_id:token\titem_id:token\titem_id:float\n1\t2\t3\n", r"d.inter:1: duplicate header name 'item_id'"),
    ("user_id:token\trating:float\n1\t2\n", r"d.inter:1: no 'item_id' column"),
    ("user_id:float\titem_id:token\n1\t2\n", r"d.inter:1: column 'user_id' has type 'float'; ids must be 'token'"),
    ("user_id:token\titem_id:token\n1\t2\n3\t4\t5\n", r"d.inter:3: 3 columns, the header has 2"),
    ("user_id:token\titem_id:token\n1 2\n", r"d.inter:2: 1 columns, the header has 2"),
    ("user_id:token\titem_id:token\tt:float\n1\t2\tnoon\n", r"d.inter:2: column 't' \(float\): 'noon' is not a number"),
    ("user_id:token\titem_id:token\tt:float\n1\t2\t\n", r"d.inter:2: empty value in float column 't'"),
    ("user_id:token\titem_id:token\tt:float\n1\t2\tinf\n", r"d.inter:2: column 't': 'inf' is not a finite"),
    ("user_id:token\titem_id:token\tv:float_seq\n1\t2\t1.5 x\n", r"d.inter:2: column 'v' \(float_seq\): 'x'"),
    ("user_id:token\titem_id:token\n\t2\n", r"d.inter:2: empty 'user_id'"),
    ('user_id:token\titem_id:token\n"1\t2\n', r"d.inter:2: column 'user_id' starts with a double quote"),
])
def test_each_problem_is_one_line_naming_file_and_line(tmp_path, text, pattern):
    report = check_atomic_file(write(tmp_path, text))
    assert not report.ok
    assert all("\n" not in p for p in report.problems)
    assert re.search(pattern, report.problems[0]), report.problems
    with pytest.raises(DataFormatError, match=pattern):
        report.raise_if_failed()


def test_binary_and_wrong_encoding(tmp_path):
    utf16 = check_atomic_file(write(tmp_path, GOOD.encode("utf-16"), mode="wb"))
    assert not utf16.ok and re.search(r"d.inter:1: (not valid utf-8|NUL byte)", utf16.problems[0])
    latin = check_atomic_file(write(tmp_path, "user_id:token\titem_id:token\n1\tcaf\xe9\n".encode("latin-1"), mode="wb"))
    assert re.search(r"d.inter:2: not valid utf-8", latin.problems[0])


def test_item_file_needs_only_item_id_and_blank_lines_are_skipped(tmp_path):
    item = write(tmp_path, "item_id:token\tgenre:token_seq\n10\tA B\n\n11\t\n", "d.item")
    report = check_atomic_file(item)
    assert report.ok and report.rows == 2
    assert not check_atomic_file(write(tmp_path, "genre:token_seq\nA\n", "e.item")).ok


def test_many_problems_are_capped(tmp_path):
    rows = "".join(f"{i}\t{i}\tx\n" for i in range(500))
    report = check_atomic_file(write(tmp_path, "user_id:token\titem_id:token\tt:float\n" + rows))
    assert len(report.problems) == 20 and report.more_problems > 0
    assert "more; run 'recbole-ext data check" in report.summary()


# --- property-based: random damage never crashes the checker, and what passes, pandas reads ---

CELL = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


def _recbole_read(path, columns):
    """What RecBole 1.2.1's _load_feat does with a file (python engine, str/float dtypes)."""
    dtype = {f"{c.name}:{c.type}": (float if c.type == "float" else str) for c in columns}
    return pd.read_csv(path, delimiter="\t", dtype=dtype, engine="python", encoding="utf-8")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_random_bytes_never_crash(tmp_path, data):
    report = check_atomic_file(write(tmp_path, data, mode="wb"))
    assert report.ok or all(p.startswith(str(tmp_path / "d.inter")) for p in report.problems)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.lists(st.sampled_from(["user_id:token", "item_id:token", "rating:float", "timestamp:float",
                                        "tags:token_seq", "emb:float_seq", "x:tokn", "y", "user_id:token"]),
                       min_size=1, max_size=5),
       rows=st.lists(st.lists(st.one_of(CELL, st.sampled_from(["1", "2.5", "-3", "nan", "", "a b", "1 2"])),
                              min_size=0, max_size=6), max_size=6),
       separator=st.sampled_from(["\t", "\t", ",", " "]))
def test_structured_damage_is_reported_and_accepted_files_load(tmp_path, header, rows, separator):
    text = separator.join(header) + "\n" + "".join(separator.join(r) + "\n" for r in rows)
    path = write(tmp_path, text)
    report = check_atomic_file(path)
    for problem in report.problems:
        assert problem.startswith(f"{path}") and "\n" not in problem
    if report.ok:  # the checker's promise: RecBole's reader then loads every row
        frame = _recbole_read(path, report.columns)
        assert len(frame) == report.rows
        for column in report.columns:
            if column.type == "float":
                assert frame[f"{column.name}:float"].notna().all()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(atomic.CACHE_DIR_ENV, str(folder))
    return folder


def test_a_passed_file_is_not_read_again_until_its_bytes_change(tmp_path, cache_dir, monkeypatch):
    path = write(tmp_path, GOOD)
    first = check_atomic_file_cached(path)
    assert first.ok and (cache_dir / "atomic-checks.json").is_file()
    reads = []
    real = atomic.check_atomic_file
    monkeypatch.setattr(atomic, "check_atomic_file", lambda *args, **kwargs: reads.append(args) or real(*args, **kwargs))
    again = check_atomic_file_cached(path)
    assert reads == [] and again.ok and (again.rows, again.columns) == (first.rows, first.columns)
    # same size, same modification time, other bytes: still checked again, and the problem found
    stat = path.stat()
    path.write_text(GOOD.replace("\t4\t", "\tx\t"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = check_atomic_file_cached(path)
    assert len(reads) == 1 and changed.problems == [f"{path}:2: column 'rating' (float): 'x' is not a number"]
    check_atomic_file_cached(path)
    assert len(reads) == 2  # failures are never remembered
    # other options are another check
    check_atomic_file_cached(write(tmp_path, GOOD), id_fields=("user_id",))
    assert len(reads) == 3


def test_a_damaged_or_unwritable_cache_only_costs_time(tmp_path, cache_dir, monkeypatch):
    path = write(tmp_path, GOOD)
    cache_dir.mkdir()
    (cache_dir / "atomic-checks.json").write_text("{not json")
    assert check_atomic_file_cached(path).ok
    entries = json.loads((cache_dir / "atomic-checks.json").read_text())
    assert len(entries) == 1
    key = next(iter(entries))
    (cache_dir / "atomic-checks.json").write_text(json.dumps({key: {"rows": "many"}}))
    assert check_atomic_file_cached(path).ok  # a damaged entry is a miss: checked again
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(atomic.CACHE_DIR_ENV, str(blocked))  # its cache folder cannot be made
    report = check_atomic_file_cached(path)
    assert report.ok and report.rows == 2


@pytest.mark.parametrize("off", ["off", "OFF", "none", "0", "false"])
def test_the_cache_can_be_switched_off(tmp_path, monkeypatch, off):
    monkeypatch.setenv(atomic.CACHE_DIR_ENV, off)
    monkeypatch.chdir(tmp_path)  # were "off" taken for a folder, it would appear here
    path = write(tmp_path, GOOD)
    reads = []
    real = atomic.check_atomic_file
    monkeypatch.setattr(atomic, "check_atomic_file", lambda *args, **kwargs: reads.append(args) or real(*args, **kwargs))
    assert check_atomic_file_cached(path).ok and check_atomic_file_cached(path).ok
    assert len(reads) == 2 and atomic.check_cache_path() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_file_rewritten_during_its_check_is_not_remembered(tmp_path, cache_dir, monkeypatch):
    path = write(tmp_path, GOOD)
    real = atomic.check_atomic_file

    def check_then_rewrite(*args, **kwargs):
        report = real(*args, **kwargs)
        path.write_text(GOOD + "2\t10\tx\t102\n")  # the bytes hashed before the check are gone
        return report

    monkeypatch.setattr(atomic, "check_atomic_file", check_then_rewrite)
    assert check_atomic_file_cached(path).ok  # what was read passed
    assert not (cache_dir / "atomic-checks.json").exists()
    monkeypatch.setattr(atomic, "check_atomic_file", real)
    assert not check_atomic_file_cached(path).ok  # the new bytes are checked, not taken from a cache
