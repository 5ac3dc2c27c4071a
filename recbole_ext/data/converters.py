"""Convert the papers' dataset copies into RecBole atomic files (``NAME.inter`` [+ ``.item``, ``.user``]).

Formats (``--format``):

- ``s3rec``    one line per user ``uid i1 i2 ...`` in time order (S3-Rec's Beauty, Sports, Clothing,
               Yelp); optional ``*_item2attributes.json`` (item -> attribute ids) becomes an ``.item``
               file with an ``attributes:token_seq`` feature (SASRecF/FDSA ``selected_features``);
               optional ``*_with_time_intervals.txt`` (the same line, a TAB, then the seconds since
               the previous interaction) gives real relative timestamps.
- ``sasrec``   ``user item`` per line in time order (SASRec's data files).
- ``ml-seq``   ML-1M as ``uid m1 m2 ...`` with original MovieLens ids, plus ``movies.dat`` (genres) and
               ``users.dat``.
- ``grouplens`` ``ratings.dat`` (``::``), ml-100k ``u.data`` (TAB) or ML-20M ``ratings.csv``, with
               ratings and timestamps; plus ``movies.dat``/``u.item``/``movies.csv`` and ``users.dat``/``u.user``.
- ``amazon-ratings`` McAuley's Amazon 2014 "ratings only" CSV (``ratings_Beauty.csv``, ...): ``user,item,
               rating,unix time`` per line, no header.
- ``atomic``   an existing ``.inter`` (its ``.item``/``.user`` siblings come along): checked, re-filtered.
- ``reczoo-ctr`` reczoo's CTR benchmarks (``AmazonElectronics_x1``): ``train.csv`` and ``test.csv``,
               already split, so written as RecBole benchmark files ``NAME.train.inter``/``NAME.test.inter``
               and ``NAME.item``; no filters apply (:mod:`recbole_ext.data.reczoo`).

The readers return a :class:`~recbole_ext.data.sources.Source` (or a ``Benchmark``); this module
filters it and writes the atomic files.

Sources without time get synthetic timestamps: the row number in the source (1, 2, ...), strictly
increasing, so RecBole's ``order: TO`` sees exactly the source's order. Sources with relative times
may hold ties (interval 0); RecBole sorts with a stable sort, so the file order (the source order)
breaks them. Either way ``NAME.meta.json`` says which. Benchmark files have no time: RecBole reads
each file as one split, in file order.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from recbole_ext.data.atomic import check_atomic_file, check_atomic_file_cached
from recbole_ext.files import file_sha256
from recbole_ext.data.filters import FilterSpec, apply_filters, counts
from recbole_ext.data.reczoo import read_reczoo_ctr
from recbole_ext.data.sources import Benchmark, Source, Table, files_by_role, read_text
from recbole_ext.errors import DataFormatError

FORMATS = ("s3rec", "sasrec", "ml-seq", "grouplens", "amazon-ratings", "atomic", "reczoo-ctr")
ML100K_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                 "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                 "War", "Western")  # ml-100k README / u.genre order (the 19 flags of u.item)


# ----------------------------------------------------------------------------------------------
# helpers


def _token_ok(token: str) -> bool:
    return bool(token) and not token.startswith('"')


def _parse_sequences(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """``uid i1 i2 ...`` lines -> user ids, item lists and line numbers (errors name the line)."""
    users, sequences, line_numbers = [], [], []
    seen: dict[str, int] = {}
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        user, items = parts[0], parts[1:]
        if not items:
            raise DataFormatError(f"{path}:{number}: user {user!r} has no items (expected 'user item item ...')")
        if user in seen:
            raise DataFormatError(f"{path}:{number}: user {user!r} already has a line ({path}:{seen[user]}); "
                                  f"one line per user expected")
        bad = next((t for t in parts if not _token_ok(t)), None)
        if bad is not None:
            raise DataFormatError(f"{path}:{number}: id {bad!r} starts with a double quote")
        seen[user] = number
        users.append(user)
        sequences.append(items)
        line_numbers.append(number)
    if not users:
        raise DataFormatError(f"{path}: no sequences (expected one line per user: 'user item item ...')")
    return users, sequences, line_numbers


def _sequence_frame(users: list[str], sequences: list[list[str]]) -> pd.DataFrame:
    lengths = np.fromiter((len(s) for s in sequences), dtype=np.int64, count=len(sequences))
    items = np.fromiter((i for s in sequences for i in s), dtype=object, count=int(lengths.sum()))
    return pd.DataFrame({"user_id": np.repeat(np.array(users, dtype=object), lengths), "item_id": items})


def _synthetic_timestamps(frame: pd.DataFrame) -> pd.DataFrame:
    # Row number in source order: strictly increasing within every user (and overall), so
    # RecBole's time ordering reproduces the source order exactly, with no ties.
    frame["timestamp"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    return frame


SYNTHETIC = ("synthetic: the source has no time; timestamp = row number in the source (1, 2, ...), "
             "strictly increasing, so RecBole's order TO keeps each user's source order")


# ----------------------------------------------------------------------------------------------
# readers


def read_s3rec(paths: list[Path]) -> Source:
    files = files_by_role(paths, {"attributes": ("_item2attributes.json",), "times": ("_with_time_intervals.txt",)}, "s3rec")
    if "main" not in files and "times" not in files:
        raise DataFormatError("--format s3rec needs the sequence file (e.g. Beauty.txt) or *_with_time_intervals.txt")
    notes = []
    if "times" in files:
        users, sequences, times = _read_time_intervals(files["times"])
        if "main" in files:  # both given: they must describe the same sequences
            main_users, main_sequences, numbers = _parse_sequences(files["main"])
            if main_users != users or main_sequences != sequences:
                index = next(i for i, pair in enumerate(zip(zip(main_users, main_sequences), zip(users, sequences)))
                             if pair[0] != pair[1]) if len(main_users) == len(users) else None
                where = f"{files['main']}:{numbers[index]}" if index is not None else str(files["main"])
                raise DataFormatError(f"{where}: sequences differ from {files['times'].name}; "
                                      f"pass files of the same dataset")
        frame = _sequence_frame(users, sequences)
        frame["timestamp"] = times
        ties = int((frame.groupby("user_id", sort=False)["timestamp"].diff() == 0).sum())
        stamp = (f"relative: cumulative seconds from {files['times'].name} (each user starts at 0); "
                 f"{ties} ties (interval 0) keep the source order through RecBole's stable sort")
    else:
        users, sequences, _ = _parse_sequences(files["main"])
        frame = _synthetic_timestamps(_sequence_frame(users, sequences))
        stamp = SYNTHETIC
    item = _read_item_attributes(files["attributes"]) if "attributes" in files else None
    return Source(frame, {"user_id": "token", "item_id": "token", "timestamp": "float"}, stamp, item=item, notes=notes)


def _read_time_intervals(path: Path) -> tuple[list[str], list[list[str]], np.ndarray]:
    users, sequences, times = [], [], []
    seen: set[str] = set()
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        if line.count("\t") != 1:
            raise DataFormatError(f"{path}:{number}: expected 'user item ... <TAB> seconds ...' (one TAB), "
                                  f"found {line.count(chr(9))} TABs")
        left, right = line.split("\t")
        parts = left.split()
        if len(parts) < 2:
            raise DataFormatError(f"{path}:{number}: no items before the TAB")
        if parts[0] in seen:
            raise DataFormatError(f"{path}:{number}: user {parts[0]!r} has a second line")
        seen.add(parts[0])
        try:
            gaps = np.array(right.split(), dtype=np.int64)
        except ValueError:
            raise DataFormatError(f"{path}:{number}: the intervals after the TAB must be whole seconds") from None
        if len(gaps) != len(parts) - 1:
            raise DataFormatError(f"{path}:{number}: {len(parts) - 1} items but {len(gaps)} intervals")
        if (gaps < 0).any():
            raise DataFormatError(f"{path}:{number}: negative interval {int(gaps[gaps < 0][0])}")
        users.append(parts[0])
        sequences.append(parts[1:])
        times.append(np.cumsum(gaps))
    if not users:
        raise DataFormatError(f"{path}: no sequences")
    return users, sequences, np.concatenate(times)


def _read_item_attributes(path: Path) -> Table:
    try:
        mapping = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataFormatError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    if not isinstance(mapping, dict):
        raise DataFormatError(f"{path}: expected a JSON object item id -> list of attribute ids")
    items, values = [], []
    for key, attributes in mapping.items():
        if not isinstance(attributes, list):
            raise DataFormatError(f"{path}: item {key!r}: expected a list of attribute ids, got {type(attributes).__name__}")
        items.append(str(key))
        values.append(" ".join(str(a) for a in attributes))
    frame = pd.DataFrame({"item_id": items, "attributes": values})
    return Table(frame, {"item_id": "token", "attributes": "token_seq"})


def read_sasrec(paths: list[Path]) -> Source:
    if len(paths) != 1:
        raise DataFormatError(f"--format sasrec takes one file ('user item' per line), got {len(paths)}")
    path = paths[0]
    rows = [line.split() for line in read_text(path).splitlines()]
    for number, row in enumerate(rows, start=1):
        if row and len(row) != 2:
            raise DataFormatError(f"{path}:{number}: expected 'user item', found {len(row)} fields")
        if row and not all(map(_token_ok, row)):
            raise DataFormatError(f"{path}:{number}: an id starts with a double quote")
    rows = [row for row in rows if row]
    if not rows:
        raise DataFormatError(f"{path}: no interactions")
    frame = pd.DataFrame(rows, columns=["user_id", "item_id"])
    return Source(_synthetic_timestamps(frame), {"user_id": "token", "item_id": "token", "timestamp": "float"},
                  SYNTHETIC)


def _read_movies(path: Path) -> Table:
    """GroupLens ``movies.dat`` (``id::Title (Year)::G1|G2``, Latin-1) or ML-20M ``movies.csv``."""
    if path.suffix == ".csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        if not {"movieId", "genres"} <= set(frame.columns):
            raise DataFormatError(f"{path}:1: expected columns movieId,title,genres")
        ids, genres, titles = frame["movieId"], frame["genres"], frame.get("title", pd.Series([""] * len(frame)))
    else:
        lines = read_text(path, encoding="latin-1").splitlines()
        parts = [line.split("::") for line in lines if line.strip()]
        bad = next((n for n, p in enumerate(parts, start=1) if len(p) != 3), None)
        if bad is not None:
            raise DataFormatError(f"{path}:{bad}: expected 'MovieID::Title::Genres'")
        ids = pd.Series([p[0] for p in parts])
        titles = pd.Series([p[1] for p in parts])
        genres = pd.Series([p[2] for p in parts])
    year = titles.str.extract(r"\((\d{4})\)\s*$")[0].fillna("")
    genre = genres.str.replace("(no genres listed)", "", regex=False).str.split("|").map(
        lambda gs: " ".join(g.replace(" ", "_") for g in gs if g))
    frame = pd.DataFrame({"item_id": ids.str.strip(), "release_year": year, "genre": genre})
    return Table(frame, {"item_id": "token", "release_year": "token", "genre": "token_seq"})


def _read_u_item(path: Path) -> Table:
    """ml-100k ``u.item``: ``id|title|release date|video date|url|19 genre flags`` (Latin-1)."""
    rows = [line.split("|") for line in read_text(path, encoding="latin-1").splitlines() if line.strip()]
    bad = next((n for n, r in enumerate(rows, start=1) if len(r) != 5 + len(ML100K_GENRES)), None)
    if bad is not None:
        raise DataFormatError(f"{path}:{bad}: expected {5 + len(ML100K_GENRES)} '|'-separated fields (u.item)")
    genre = [" ".join(g for g, flag in zip(ML100K_GENRES, r[5:]) if flag == "1") for r in rows]
    year = [r[2][-4:] if len(r[2]) >= 4 else "" for r in rows]
    frame = pd.DataFrame({"item_id": [r[0] for r in rows], "release_year": year, "genre": genre})
    return Table(frame, {"item_id": "token", "release_year": "token", "genre": "token_seq"})


def _read_users(path: Path) -> Table:
    """GroupLens ``users.dat`` (``id::gender::age::occupation::zip``) or ml-100k ``u.user`` (``|``)."""
    sep, names = ("|", ["user_id", "age", "gender", "occupation", "zip_code"]) if path.name == "u.user" else \
        ("::", ["user_id", "gender", "age", "occupation", "zip_code"])
    rows = [line.split(sep) for line in read_text(path, encoding="latin-1").splitlines() if line.strip()]
    bad = next((n for n, r in enumerate(rows, start=1) if len(r) != 5), None)
    if bad is not None:
        raise DataFormatError(f"{path}:{bad}: expected 5 {sep!r}-separated fields ({sep.join(names)})")
    frame = pd.DataFrame(rows, columns=names)[["user_id", "age", "gender", "occupation", "zip_code"]]
    return Table(frame, {c: "token" for c in frame.columns})


def read_ml_seq(paths: list[Path]) -> Source:
    files = files_by_role(paths, {"items": ("movies.dat",), "users": ("users.dat",)}, "ml-seq")
    if "main" not in files:
        raise DataFormatError("--format ml-seq needs the sequence file (e.g. ml-1m_seq_from_pkl.txt)")
    users, sequences, _ = _parse_sequences(files["main"])
    frame = _synthetic_timestamps(_sequence_frame(users, sequences))
    return Source(frame, {"user_id": "token", "item_id": "token", "timestamp": "float"}, SYNTHETIC,
                  item=_read_movies(files["items"]) if "items" in files else None,
                  user=_read_users(files["users"]) if "users" in files else None,
                  notes=["order-only source: ties within one second are in the source's (arbitrary) order"])


def _read_ratings(path: Path) -> pd.DataFrame:
    names = ["user_id", "item_id", "rating", "timestamp"]
    try:
        if path.suffix == ".csv":  # ML-20M/25M: header userId,movieId,rating,timestamp
            frame = pd.read_csv(path, dtype=str)
            if list(frame.columns[:4]) != ["userId", "movieId", "rating", "timestamp"]:
                raise DataFormatError(f"{path}:1: expected the header 'userId,movieId,rating,timestamp'")
            frame = frame.iloc[:, :4].copy()
            frame.columns = names
        elif path.name == "u.data":  # ml-100k: TAB-separated
            frame = pd.read_csv(path, sep="\t", header=None, names=names, dtype=str, quoting=csv.QUOTE_NONE)
        else:  # ratings.dat: UserID::MovieID::Rating::Timestamp. Splitting on ':' keeps the C parser (fast).
            raw = pd.read_csv(path, sep=":", header=None, dtype=str, quoting=csv.QUOTE_NONE)
            if raw.shape[1] != 7 or raw[[1, 3, 5]].notna().any().any():
                raise DataFormatError(f"{path}: expected 'UserID::MovieID::Rating::Timestamp' on every line")
            frame = raw[[0, 2, 4, 6]].copy()
            frame.columns = names
    except (pd.errors.ParserError, ValueError) as error:
        if isinstance(error, DataFormatError):
            raise
        raise DataFormatError(f"{path}: cannot parse ratings: {str(error).splitlines()[0]}") from None
    return _checked_ratings(frame, path, header_lines=1 if path.suffix == ".csv" else 0)


def _checked_ratings(frame: pd.DataFrame, path: Path, header_lines: int) -> pd.DataFrame:
    """``user_id, item_id, rating, timestamp`` read as text: rating and timestamp made numbers; the
    first bad value, or empty id, is an error naming its line."""
    for column in ("rating", "timestamp"):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna().to_numpy()
        if bad.any():
            row = int(np.argmax(bad))
            raise DataFormatError(f"{path}:{row + 1 + header_lines}: {column} {frame[column].iloc[row]!r} is not a number")
        frame[column] = values
    if frame[["user_id", "item_id"]].isna().any().any():
        row = int(np.argmax(frame[["user_id", "item_id"]].isna().any(axis=1).to_numpy()))
        raise DataFormatError(f"{path}:{row + 1 + header_lines}: empty user or item id")
    return frame


def read_grouplens(paths: list[Path]) -> Source:
    files = files_by_role(paths, {"items": ("movies.dat", "u.item", "movies.csv"), "users": ("users.dat", "u.user")},
                     "grouplens")
    if "main" not in files:
        raise DataFormatError("--format grouplens needs ratings.dat, u.data or ratings.csv")
    frame = _read_ratings(files["main"])
    # Time order per user; the stable sort keeps the file order of same-second ratings.
    frame = frame.sort_values(["user_id", "timestamp"], kind="stable").reset_index(drop=True)
    item = None
    if "items" in files:
        item = _read_u_item(files["items"]) if files["items"].name == "u.item" else _read_movies(files["items"])
    user = _read_users(files["users"]) if "users" in files else None
    if frame["timestamp"].eq(frame["timestamp"].round()).all():
        frame["timestamp"] = frame["timestamp"].astype(np.int64)
    return Source(frame, {"user_id": "token", "item_id": "token", "rating": "float", "timestamp": "float"},
                  "source: the ratings' own Unix timestamps", item=item, user=user)


def read_amazon_ratings(paths: list[Path]) -> Source:
    """McAuley's Amazon 2014 "ratings only" CSV (``ratings_<Category>.csv``: ``user,item,rating,unix
    time`` per line, no header): the raw file the SASRec/TiSASRec and HLLM pipelines filter."""
    if len(paths) != 1:
        raise DataFormatError(f"--format amazon-ratings takes one ratings_<Category>.csv, got {len(paths)}")
    path = paths[0]
    names = ["user_id", "item_id", "rating", "timestamp"]
    try:
        frame = pd.read_csv(path, header=None, dtype=str, keep_default_na=False, na_values=[""],
                            quoting=csv.QUOTE_NONE)
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{path}: no interactions") from None
    except (pd.errors.ParserError, ValueError) as error:
        raise DataFormatError(f"{path}: cannot parse 'user,item,rating,timestamp' lines: "
                              f"{str(error).splitlines()[0]}") from None
    if frame.shape[1] != 4:
        raise DataFormatError(f"{path}:1: expected 4 comma-separated fields 'user,item,rating,timestamp' "
                              f"(Amazon 2014 ratings only), found {frame.shape[1]}")
    frame.columns = names
    frame = _checked_ratings(frame, path, header_lines=0)
    if frame["timestamp"].eq(frame["timestamp"].round()).all():
        frame["timestamp"] = frame["timestamp"].astype(np.int64)
    # Reviews carry a day, so a user's same-day items tie: the stable sort keeps their file order,
    # as the SASRec/TiSASRec preprocessing (a stable sort per user) does.
    frame = frame.sort_values(["user_id", "timestamp"], kind="stable").reset_index(drop=True)
    return Source(frame, {"user_id": "token", "item_id": "token", "rating": "float", "timestamp": "float"},
                  "source: the reviews' Unix times (day resolution; ties keep the file's order)")


def read_atomic(paths: list[Path]) -> Source:
    if len(paths) != 1:
        raise DataFormatError(f"--format atomic takes one .inter file (its .item/.user come along), got {len(paths)}")
    path = paths[0]
    if path.is_dir():
        path = path / f"{path.name}.inter"
    report = check_atomic_file(path, kind="inter")
    report.raise_if_failed()
    inter = _load_atomic(path, report.columns)
    types = {c.name: c.type for c in report.columns}
    if "timestamp" in inter.columns:
        stamp = "source: the atomic file's timestamp column"
    else:
        inter = _synthetic_timestamps(inter)
        types["timestamp"] = "float"
        stamp = SYNTHETIC.replace("the source has no time", "the .inter file has no timestamp column")
    tables = {}
    for kind in ("item", "user"):
        sibling = path.with_suffix(f".{kind}")
        if sibling.is_file():
            sibling_report = check_atomic_file(sibling, kind=kind)
            sibling_report.raise_if_failed()
            tables[kind] = Table(_load_atomic(sibling, sibling_report.columns),
                                 {c.name: c.type for c in sibling_report.columns})
    return Source(inter, types, stamp, item=tables.get("item"), user=tables.get("user"))


def _load_atomic(path: Path, columns) -> pd.DataFrame:
    """A checked atomic file as strings (floats stay text: written back unchanged)."""
    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
    frame.columns = [c.name for c in columns]
    return frame


READERS = {"s3rec": read_s3rec, "sasrec": read_sasrec, "ml-seq": read_ml_seq, "grouplens": read_grouplens,
           "amazon-ratings": read_amazon_ratings, "atomic": read_atomic}
BENCHMARK_READERS = {"reczoo-ctr": read_reczoo_ctr}  # already split sources (RecBole's benchmark_filename)


# ----------------------------------------------------------------------------------------------
# conversion


@dataclass
class Conversion:
    directory: Path
    files: list[Path]
    meta: dict


def write_atomic(path: Path, table: Table) -> None:
    frame = table.frame[list(table.types)]
    header = [f"{name}:{type_}" for name, type_ in table.types.items()]
    frame.to_csv(path, sep="\t", index=False, header=header, lineterminator="\n", quoting=csv.QUOTE_NONE,
                 escapechar=None)


def resolve_filters(preset, overrides: dict, has_rating: bool, fmt: str) -> tuple[FilterSpec, dict]:
    """The preset's filters with the user's explicit overrides applied (both recorded in the meta file)."""
    base = preset.filters if preset is not None else FilterSpec()
    values = base.as_dict()
    applied = {}
    for key, value in overrides.items():
        if value is None:
            continue
        values[key] = None if value == "none" else value
        applied[key] = value
    spec = FilterSpec(**values)
    if spec.min_rating is not None and not has_rating:
        if preset is not None and "min_rating" not in applied:
            raise DataFormatError(
                f"preset {preset.name!r} keeps ratings >= {spec.min_rating:g} ({preset.protocol or preset.published.source}), "
                f"but the --format {fmt} input has no ratings; give rated input (--format grouplens: ratings.dat, "
                f"or an atomic .inter with a rating column) or "
                f"pass --min-rating none to convert without the rating filter (recorded in the meta file)")
        raise DataFormatError(f"--min-rating {spec.min_rating:g}: the --format {fmt} input has no ratings")
    return spec, applied


def convert(fmt: str, inputs: list[str | os.PathLike], name: str, out: str | os.PathLike = "dataset_atomic",
            preset_name: str | None = None, overrides: dict | None = None, force: bool = False) -> Conversion:
    """Read, filter, write ``<out>/<name>/<name>.{inter,item,user,meta.json}`` (an already split source:
    ``<name>.<split>.inter`` per split instead of ``<name>.inter``); nothing is written on failure."""
    from recbole_ext.data.presets import get_preset

    if fmt not in READERS and fmt not in BENCHMARK_READERS:
        raise DataFormatError(f"unknown --format {fmt!r}; known: {', '.join(FORMATS)}")
    if not name or any(c in name for c in "/\\\t\n ") or name.startswith("."):
        raise DataFormatError(f"--name {name!r}: use a plain dataset name (no spaces or slashes)")
    preset = get_preset(preset_name) if preset_name else None
    if preset is not None and fmt not in preset.formats:
        raise DataFormatError(f"preset {preset.name!r} is defined for --format {' or '.join(preset.formats)}, "
                              f"not {fmt}" + (f" ({preset.notes[0]})" if preset.notes else ""))
    paths = [Path(p) for p in inputs]
    for path in paths:
        if not path.exists():
            raise DataFormatError(f"{path}: no such file (point --input at your copy of the dataset)")
    directory = Path(out) / name
    if directory.exists() and not force:
        raise DataFormatError(f"{directory}: already exists; pass --force to replace it")

    started = time.time()
    if fmt in BENCHMARK_READERS:
        tables, details = _benchmark_tables(BENCHMARK_READERS[fmt](paths), preset, overrides or {}, fmt)
    else:
        tables, details = _filtered_tables(READERS[fmt](paths), preset, overrides or {}, fmt)
    meta = {"name": name, "format": fmt, "preset": preset.name if preset else None,
            "source": [{"path": str(p), "bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in paths if p.is_file()],
            **details}
    written = _write_dataset(Path(out), name, tables, meta, started)
    return Conversion(directory, [directory / f for f in written] + [directory / f"{name}.meta.json"], meta)


def _filtered_tables(source: Source, preset, overrides: dict, fmt: str) -> tuple[dict[str, Table], dict]:
    """The protocol's filters applied: the tables to write (by file suffix) and their meta entries."""
    spec, applied = resolve_filters(preset, overrides, "rating" in source.inter.columns, fmt)
    before = counts(source.inter)
    inter = apply_filters(source.inter, spec) if not spec.is_noop() else source.inter
    if len(inter) == 0:
        raise DataFormatError(f"no interactions left after filtering {spec.as_dict()}")
    after = counts(inter)

    tables = {"inter": Table(inter, source.inter_types)}
    if source.item is not None:
        item = source.item.frame
        keep_all = preset is not None and preset.keep_unrated_items
        # RecBole counts every id of the .item file as an item (a candidate in full ranking), so
        # items the filters removed must leave the .item file too, unless the protocol keeps them.
        tables["item"] = Table(item if keep_all else item[item["item_id"].isin(set(inter["item_id"]))],
                               source.item.types)
    if source.user is not None:
        user = source.user.frame
        tables["user"] = Table(user[user["user_id"].isin(set(inter["user_id"]))], source.user.types)
    details = {"filters": spec.as_dict(), "overrides": applied, "timestamps": source.timestamps,
               "notes": source.notes + (list(preset.notes) if preset else []),
               "counts": {"source": before, "written": after},
               "item_rows": len(tables["item"].frame) if "item" in tables else None}
    return tables, details


def _benchmark_tables(benchmark: Benchmark, preset, overrides: dict, fmt: str) -> tuple[dict[str, Table], dict]:
    """An already split source's tables (``<split>.inter`` per split) and meta entries; no filters."""
    spec, applied = resolve_filters(preset, overrides, False, fmt)
    if not spec.is_noop():
        # Filtering would change the published splits; RecBole does not filter benchmark files either.
        raise DataFormatError(f"--format {fmt} is already split into train/test and takes no filters, got {applied}")
    tables = {f"{split}.inter": table for split, table in benchmark.splits.items()}
    if benchmark.item is not None:
        tables["item"] = benchmark.item
    details = {"filters": spec.as_dict(), "overrides": applied,
               "timestamps": "none: benchmark files (one per split), read by RecBole in file order, never sorted",
               "notes": benchmark.notes + (list(preset.notes) if preset else []),
               "counts": {"source": benchmark.counts, "written": benchmark.counts},
               "history": benchmark.history,
               "item_rows": len(benchmark.item.frame) if benchmark.item is not None else None}
    return tables, details


def _write_dataset(out: Path, name: str, tables: dict[str, Table], meta: dict, started: float) -> list[str]:
    """Write ``<out>/<name>/<name>.<suffix>`` per table and the meta file through a staging folder,
    then swap it in whole; each file passes :func:`check_atomic_file` first. Returns the file names."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out))
    directory = out / name
    try:
        written = []
        for suffix, table in tables.items():
            path = staging / f"{name}.{suffix}"
            write_atomic(path, table)
            # never hand RecBole a bad file; a pass is remembered, so the first run need not read it again
            check_atomic_file_cached(path, kind=suffix.rsplit(".", 1)[-1]).raise_if_failed()
            written.append(path.name)
        meta.update(files=written, created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                    seconds=round(time.time() - started, 2))
        (staging / f"{name}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written
