"""Each converter on its tiny fixture (tests/data/fixtures, from scripts/make_fixtures.py): the same
40-user interactions come out of every source format, in each user's source order."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from recbole_ext.data.atomic import check_atomic_file
from recbole_ext.data.converters import convert
from recbole_ext.errors import DataFormatError

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures"


def read(path) -> pd.DataFrame:
    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
    frame.columns = [c.split(":")[0] for c in frame.columns]
    return frame


def expected_sequences() -> dict[str, list[str]]:
    lines = (FIX / "s3rec" / "Tiny.txt").read_text().split("\n")
    return {p[0]: p[1:] for p in (line.split() for line in lines) if p}


def sequences(frame: pd.DataFrame, time_ordered=True) -> dict[str, list[str]]:
    if time_ordered:  # what RecBole's order: TO does: a stable sort by timestamp
        frame = frame.iloc[frame["timestamp"].astype(float).argsort(kind="stable")]
    return {u: g["item_id"].tolist() for u, g in frame.groupby("user_id", sort=False)}


def test_fixtures_are_reproducible():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_fixtures.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_s3rec_without_time_gets_strictly_increasing_synthetic_timestamps(tmp_path):
    result = convert("s3rec", [FIX / "s3rec" / "Tiny.txt", FIX / "s3rec" / "Tiny_item2attributes.json"],
                     "tiny", tmp_path)
    inter = read(tmp_path / "tiny" / "tiny.inter")
    assert list(inter.columns) == ["user_id", "item_id", "timestamp"]
    stamps = inter["timestamp"].astype(int)
    assert stamps.is_monotonic_increasing and stamps.is_unique
    assert sequences(inter) == expected_sequences()
    assert result.meta["timestamps"].startswith("synthetic")
    item = read(tmp_path / "tiny" / "tiny.item")
    attributes = json.loads((FIX / "s3rec" / "Tiny_item2attributes.json").read_text())
    assert set(item["item_id"]) == set(attributes) & set(inter["item_id"])  # only items that remain
    row = item.iloc[0]
    assert row["attributes"].split() == [str(a) for a in attributes[row["item_id"]]]
    assert (tmp_path / "tiny" / "tiny.item").read_text().split("\n")[0] == "item_id:token\tattributes:token_seq"


def test_s3rec_time_intervals_give_relative_timestamps_and_ties_keep_order(tmp_path):
    result = convert("s3rec", [FIX / "s3rec" / "Tiny_with_time_intervals.txt", FIX / "s3rec" / "Tiny.txt"],
                     "tiny", tmp_path)
    inter = read(tmp_path / "tiny" / "tiny.inter")
    first = (FIX / "s3rec" / "Tiny_with_time_intervals.txt").read_text().split("\n")[0]
    user, gaps = first.split()[0], [int(g) for g in first.split("\t")[1].split()]
    got = inter[inter["user_id"] == user]["timestamp"].astype(int).tolist()
    assert got == list(pd.Series(gaps).cumsum())
    assert "ties" in result.meta["timestamps"] and " 0 ties" not in result.meta["timestamps"]
    assert sequences(inter) == expected_sequences()


def test_s3rec_mismatched_files_are_refused(tmp_path):
    other = tmp_path / "Other.txt"
    lines = (FIX / "s3rec" / "Tiny.txt").read_text().split("\n")
    lines[3] = lines[3] + " 29"
    other.write_text("\n".join(lines))
    with pytest.raises(DataFormatError, match=r"Other.txt:4: sequences differ from Tiny_with_time_intervals.txt"):
        convert("s3rec", [FIX / "s3rec" / "Tiny_with_time_intervals.txt", other], "tiny", tmp_path / "out")
    assert not (tmp_path / "out" / "tiny").exists()


def test_sasrec_interleaved_lines_keep_each_users_order(tmp_path):
    convert("sasrec", [FIX / "sasrec" / "tiny.txt"], "tiny", tmp_path)
    assert sequences(read(tmp_path / "tiny" / "tiny.inter")) == expected_sequences()


def test_ml_seq_with_movies_and_users(tmp_path):
    convert("ml-seq", [FIX / "ml-seq" / "tiny_seq.txt", FIX / "ml-seq" / "movies.dat", FIX / "ml-seq" / "users.dat"],
            "tiny", tmp_path)
    inter = read(tmp_path / "tiny" / "tiny.inter")
    assert sequences(inter) == {u: [str(1000 + int(i)) for i in s] for u, s in expected_sequences().items()}
    item = read(tmp_path / "tiny" / "tiny.item")
    assert list(item.columns) == ["item_id", "release_year", "genre"]
    assert set(item["item_id"]) == set(inter["item_id"])  # movies 1031/1032 are unrated: left out
    row = item[item["item_id"] == "1003"].iloc[0]
    assert row["release_year"] == "1983" and row["genre"] == "Children's Action"
    assert list(read(tmp_path / "tiny" / "tiny.user").columns) == ["user_id", "age", "gender", "occupation", "zip_code"]  # as RecBole ml-1m.user


def test_preset_can_keep_unrated_items(tmp_path):
    convert("ml-seq", [FIX / "ml-seq" / "tiny_seq.txt", FIX / "ml-seq" / "movies.dat"], "tiny", tmp_path,
            preset_name="linrec-ml1m")
    assert {"1031", "1032"} <= set(read(tmp_path / "tiny" / "tiny.item")["item_id"])


@pytest.mark.parametrize("files", [["grouplens/ratings.dat", "grouplens/movies.dat", "grouplens/users.dat"],
                                   ["ml-100k/u.data", "ml-100k/u.item", "ml-100k/u.user"]])
def test_grouplens_ratings_are_time_sorted_with_ratings(tmp_path, files):
    convert("grouplens", [FIX / f for f in files], "tiny", tmp_path)
    inter = read(tmp_path / "tiny" / "tiny.inter")
    assert list(inter.columns) == ["user_id", "item_id", "rating", "timestamp"]
    offset = 1000 if "ratings.dat" in files[0] else 0
    want = {u: sorted(str(int(i) + offset) for i in s) for u, s in expected_sequences().items()}
    assert {u: sorted(s) for u, s in sequences(inter).items()} == want
    for _, group in inter.groupby("user_id"):  # per-user time order in the file itself
        assert group["timestamp"].astype(int).is_monotonic_increasing
    item = read(tmp_path / "tiny" / "tiny.item")
    assert "genre" in item.columns and item["genre"].str.len().gt(0).any()
    assert (tmp_path / "tiny" / "tiny.user").is_file()


def amazon_csv(tmp_path) -> tuple[Path, pd.DataFrame]:
    """The grouplens fixture's ratings as an Amazon 2014 ``ratings_*.csv``: no header, rows in no user
    order (Amazon's files are not grouped by user), and the reference conversion."""
    convert("grouplens", [FIX / "grouplens" / "ratings.dat"], "ref", tmp_path)
    reference = read(tmp_path / "ref" / "ref.inter")
    shuffled = reference.sample(frac=1, random_state=0)
    source = tmp_path / "ratings_Tiny.csv"
    source.write_text("".join(f"{u},{i},{r},{t}\n" for u, i, r, t in shuffled.itertuples(index=False)))
    return source, shuffled


def test_amazon_ratings_csv_gives_each_users_time_order(tmp_path):
    source, in_file_order = amazon_csv(tmp_path)
    result = convert("amazon-ratings", [source], "amz", tmp_path)
    inter = read(tmp_path / "amz" / "amz.inter")
    assert list(inter.columns) == ["user_id", "item_id", "rating", "timestamp"]
    assert result.meta["format"] == "amazon-ratings"
    # each user's rows in time order, and rows of one user and time (reviews carry a day) in file order
    assert in_file_order.duplicated(["user_id", "timestamp"]).any()  # the fixture has such ties
    expected = in_file_order.assign(stamp=in_file_order["timestamp"].astype(int)).sort_values(
        ["user_id", "stamp"], kind="stable")
    assert {u: g["item_id"].tolist() for u, g in inter.groupby("user_id")} == \
        {u: g["item_id"].tolist() for u, g in expected.groupby("user_id")}


def test_amazon_ratings_with_hllms_books_filter(tmp_path):
    source, _ = amazon_csv(tmp_path)
    result = convert("amazon-ratings", [source], "books", tmp_path, preset_name="cape-books")
    inter = read(tmp_path / "books" / "books.inter")
    assert result.meta["filters"] == {"min_rating": None, "user_min": 5, "item_min": 5, "kcore": "single_then_users"}
    assert inter.groupby("user_id").size().min() >= 5  # the second user pass; items are not counted again
    assert 0 < len(inter) < result.meta["counts"]["source"]["interactions"]


def test_rating_threshold_and_override_recorded(tmp_path):
    result = convert("grouplens", [FIX / "grouplens" / "ratings.dat"], "r", tmp_path, overrides={"min_rating": 4})
    assert read(tmp_path / "r" / "r.inter")["rating"].astype(float).min() >= 4
    assert result.meta["filters"]["min_rating"] == 4 and result.meta["overrides"] == {"min_rating": 4}


def test_preset_needing_ratings_fails_clearly_unless_overridden(tmp_path):
    with pytest.raises(DataFormatError, match=r"preset 'eulerformer-ml1m' keeps ratings >= 3 .* input has no "
                                              r"ratings.*--min-rating none"):
        convert("ml-seq", [FIX / "ml-seq" / "tiny_seq.txt"], "e", tmp_path, preset_name="eulerformer-ml1m")
    assert not (tmp_path / "e").exists()
    result = convert("ml-seq", [FIX / "ml-seq" / "tiny_seq.txt"], "e", tmp_path, preset_name="eulerformer-ml1m",
                     overrides={"min_rating": "none", "user_min": 2, "item_min": 2})
    meta = json.loads((tmp_path / "e" / "e.meta.json").read_text())
    assert meta["overrides"] == {"min_rating": "none", "user_min": 2, "item_min": 2}
    assert meta["filters"] == {"min_rating": None, "user_min": 2, "item_min": 2, "kcore": "iterative"}
    assert result.meta["preset"] == "eulerformer-ml1m"


def test_kcore_preset_and_meta_file(tmp_path):
    result = convert("s3rec", [FIX / "s3rec" / "Tiny.txt"], "k", tmp_path, preset_name="fearec-beauty")
    inter = read(tmp_path / "k" / "k.inter")
    assert inter.groupby("user_id").size().min() >= 5 and inter.groupby("item_id").size().min() >= 5
    meta = result.meta
    assert meta["counts"]["source"]["interactions"] > meta["counts"]["written"]["interactions"] == len(inter)
    source = FIX / "s3rec" / "Tiny.txt"
    import hashlib
    assert meta["source"][0]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert meta["format"] == "s3rec" and meta["filters"]["kcore"] == "iterative"


def test_atomic_refilters_an_existing_file(tmp_path):
    convert("grouplens", [FIX / "grouplens" / "ratings.dat", FIX / "grouplens" / "movies.dat"], "src", tmp_path)
    convert("atomic", [tmp_path / "src" / "src.inter"], "re", tmp_path, overrides={"user_min": 5, "item_min": 5})
    inter = read(tmp_path / "re" / "re.inter")
    assert list(inter.columns) == ["user_id", "item_id", "rating", "timestamp"]
    assert inter.groupby("item_id").size().min() >= 5
    assert set(read(tmp_path / "re" / "re.item")["item_id"]) == set(inter["item_id"])


def test_atomic_input_is_checked_first(tmp_path):
    bad = tmp_path / "bad.inter"
    bad.write_text("user_id:token\titem_id:token\n1\t2\t3\n")
    with pytest.raises(DataFormatError, match=r"bad.inter:2: 3 columns, the header has 2"):
        convert("atomic", [bad], "x", tmp_path / "out")
    assert not (tmp_path / "out" / "x").exists()


@pytest.mark.parametrize(("fmt", "text", "pattern"), [
    ("s3rec", "1 2 3\n2\n", r"in.txt:2: user '2' has no items"),
    ("s3rec", "1 2 3\n1 4\n", r"in.txt:2: user '1' already has a line \(.*in.txt:1\)"),
    ("s3rec", "\n\n", r"in.txt: no sequences"),
    ("sasrec", "1 2\n1 2 3\n", r"in.txt:2: expected 'user item', found 3 fields"),
    ("grouplens", "1::2::5\n", r"expected 'UserID::MovieID::Rating::Timestamp'"),
    ("amazon-ratings", "A1,B1,5.0,1360000000\nA2,B2,five,1360000001\n", r"in.txt:2: rating 'five' is not a number"),
    ("amazon-ratings", "A1,B1,5.0\n", r"in.txt:1: expected 4 comma-separated fields 'user,item,rating,timestamp'"),
    ("amazon-ratings", "A1,,5.0,1360000000\n", r"in.txt:1: empty user or item id"),
    ("amazon-ratings", "", r"in.txt: no interactions"),
    ("amazon-ratings", "A1,B1,5.0\nA2,B2,4.0,1360000000\n", r"in.txt: cannot parse 'user,item,rating,timestamp' lines"),
])
def test_bad_sources_name_file_and_line(tmp_path, fmt, text, pattern):
    source = tmp_path / "in.txt"
    source.write_text(text)
    if fmt == "grouplens":
        source = source.rename(tmp_path / "ratings.dat")
    with pytest.raises(DataFormatError, match=pattern):
        convert(fmt, [source], "x", tmp_path / "out")
    assert not (tmp_path / "out" / "x").exists()


def test_existing_output_needs_force(tmp_path):
    convert("sasrec", [FIX / "sasrec" / "tiny.txt"], "t", tmp_path)
    with pytest.raises(DataFormatError, match=r"already exists; pass --force"):
        convert("sasrec", [FIX / "sasrec" / "tiny.txt"], "t", tmp_path)
    convert("s3rec", [FIX / "s3rec" / "Tiny.txt"], "t", tmp_path, force=True)
    assert json.loads((tmp_path / "t" / "t.meta.json").read_text())["format"] == "s3rec"
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no staging folders left behind


def test_shipped_fixture_passes_the_check():
    for kind in ("inter", "item"):
        report = check_atomic_file(ROOT / "dataset_atomic" / "tiny-seq" / f"tiny-seq.{kind}")
        assert report.ok, report.problems
