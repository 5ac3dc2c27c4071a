"""reczoo's CTR benchmarks (``--format reczoo-ctr``, e.g. ``AmazonElectronics_x1``): ``train.csv`` and
``test.csv`` with ``label,user_id,item_id,cate_id,item_history,cate_history`` ('^'-separated
histories, oldest first). Already split, so read as a :class:`~recbole_ext.data.sources.Benchmark`:
RecBole benchmark files ``NAME.train.inter``/``NAME.test.inter`` (``label``, ids, ``item_id_list``
cut to its first :data:`RECZOO_HISTORY_CAP` items as FuxiCTR does) and ``NAME.item`` (each item's
``cate_id``); no filters apply. Every check names the file and line at fault."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from recbole_ext.data.sources import Benchmark, Table, files_by_role
from recbole_ext.errors import DataFormatError

RECZOO_COLUMNS = ("label", "user_id", "item_id", "cate_id", "item_history", "cate_history")
RECZOO_SEPARATOR = "^"
# FuxiCTR's max_len in the authors' AmazonElectronics_x1 config; with FuxiCTR's default 'post'
# truncation a longer history keeps its FIRST 100 ids (specs/cape.md §3.1).
RECZOO_HISTORY_CAP = 100
_CHUNK_ROWS = 200_000  # rows of long history strings joined into one text at a time (bounded memory)


def _reczoo_rows(path: Path) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One reczoo CSV as strings, checked; with each row's line number in the file and history length."""
    try:
        # Blank lines stay rows (dropped below), so row i is line i + 2 whatever the file holds.
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{path}: empty file; expected the header {','.join(RECZOO_COLUMNS)}") from None
    except pd.errors.ParserError as error:
        message = str(error).splitlines()[0]
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
        if found:
            raise DataFormatError(f"{path}:{found.group(2)}: {found.group(3)} fields, the header has {found.group(1)}") from None
        raise DataFormatError(f"{path}: cannot parse as CSV: {message}") from None
    except UnicodeDecodeError as error:
        raise DataFormatError(f"{path}: not valid utf-8 text ({error.reason})") from None
    missing = [c for c in RECZOO_COLUMNS if c not in frame.columns]
    if missing:
        raise DataFormatError(f"{path}:1: the header lacks {', '.join(missing)} (it has {','.join(frame.columns)}); "
                              f"reczoo CTR files have {','.join(RECZOO_COLUMNS)}")
    frame = frame[list(RECZOO_COLUMNS)]
    # keep_default_na=False reads a missing field as "", so a blank line is a row of "" (dropped);
    # a short row shows up below as an empty id or history.
    frame = frame[~(frame == "").all(axis=1).to_numpy()]
    if frame.empty:
        raise DataFormatError(f"{path}: no rows after the header")
    lines = frame.index.to_numpy() + 2
    frame = frame.reset_index(drop=True)

    def fail(bad, message) -> None:
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            row = int(np.argmax(bad))
            raise DataFormatError(f"{path}:{lines[row]}: {message(row)}")

    label = pd.to_numeric(frame["label"], errors="coerce")
    fail(label.isna(), lambda row: f"label {frame['label'].iloc[row]!r} is not a number")
    fail(~label.isin((0, 1)), lambda row: f"label {frame['label'].iloc[row]!r} is not 0 or 1 (a click label)")
    frame["label"] = label.astype(np.int64)
    for column in RECZOO_COLUMNS[1:]:
        # A space, TAB or newline would split an id in RecBole's space-separated token_seq or its
        # TAB-separated lines.
        if _text_has(frame[column], (" ", "\t", "\r", "\n")):
            fail(frame[column].str.contains(r"[ \t\r\n]", regex=True),
                 lambda row, c=column: f"{c} {frame[c].iloc[row][:40]!r} contains whitespace")
    for column in RECZOO_COLUMNS[1:4]:
        fail(frame[column] == "", lambda row, c=column: f"empty {c}")
    # Every row of a DIN-style CTR set has a history; DIN's masked softmax over none would be NaN.
    fail(frame["item_history"] == "", lambda row: "empty item_history (a CTR row needs at least one history item)")
    for column in RECZOO_COLUMNS[4:]:
        history, sep = frame[column], RECZOO_SEPARATOR
        if _text_has(history, (sep * 2, "\0" + sep, sep + "\0")):
            fail(history.str.startswith(sep) | history.str.endswith(sep) | history.str.contains(sep * 2, regex=False),
                 lambda row, c=column: f"empty id in {c} {frame[c].iloc[row][:40]!r}")
    item_lengths, cate_lengths = _history_lengths(frame["item_history"]), _history_lengths(frame["cate_history"])
    fail(item_lengths != cate_lengths,
         lambda row: f"item_history has {item_lengths[row]} ids but cate_history has {cate_lengths[row]}; "
                     f"they must pair up (one category per history item)")
    return frame, lines, item_lengths


def _text_has(column: pd.Series, needles: tuple[str, ...]) -> bool:
    """Whether any value holds one of ``needles`` (values framed by NUL): a scan of the joined text,
    far cheaper than a row-wise string method over millions of long histories, which then runs only
    to find the row of a hit."""
    for start in range(0, len(column), _CHUNK_ROWS):
        text = "\0" + "\0".join(column.iloc[start:start + _CHUNK_ROWS]) + "\0"
        if any(needle in text for needle in needles):
            return True
    return False


def _history_lengths(history: pd.Series) -> np.ndarray:
    # str.count per value: pandas' .str.count goes through a regex and is ~4x slower here.
    values = history.to_numpy()
    separators = np.fromiter((h.count(RECZOO_SEPARATOR) for h in values), dtype=np.int64, count=len(values))
    return np.where(values == "", 0, separators + 1)


def _cut_history(history: pd.Series, lengths: np.ndarray, cap: int) -> pd.Series:
    """'^'-separated ids -> RecBole's space-separated token_seq, keeping the first ``cap`` ids."""
    long = lengths > cap
    if long.any():
        history = history.copy()
        history[long] = history[long].str.split(RECZOO_SEPARATOR, n=cap).str[:cap].str.join(RECZOO_SEPARATOR)
    return history.str.replace(RECZOO_SEPARATOR, " ", regex=False)


def _item_categories(parts: list[tuple[Path, pd.DataFrame, np.ndarray, np.ndarray]]) -> Table:
    """Each item's category from every (item, category) pair of the targets and the full histories.

    An item with two categories is an error naming the line where the second one appears."""
    pieces = []
    for file_index, (_, frame, lines, lengths) in enumerate(parts):
        pieces.append(pd.DataFrame({"item_id": frame["item_id"], "cate_id": frame["cate_id"],
                                    "file": file_index, "line": lines}))
        # A positive and its sampled negative share one history: explode each distinct one once.
        keep = ~frame.duplicated(["item_history", "cate_history"]).to_numpy()
        histories, history_lines, history_lengths = frame[keep], lines[keep], lengths[keep]
        for start in range(0, len(histories), _CHUNK_ROWS):
            stop = start + _CHUNK_ROWS
            # One join and one split per chunk: C-speed string work instead of a loop over rows.
            items = RECZOO_SEPARATOR.join(histories["item_history"].iloc[start:stop]).split(RECZOO_SEPARATOR)
            cates = RECZOO_SEPARATOR.join(histories["cate_history"].iloc[start:stop]).split(RECZOO_SEPARATOR)
            pieces.append(pd.DataFrame({"item_id": items, "cate_id": cates, "file": file_index,
                                        "line": np.repeat(history_lines[start:stop], history_lengths[start:stop])})
                          .drop_duplicates(["item_id", "cate_id"]))
    pairs = (pd.concat(pieces, ignore_index=True).sort_values(["file", "line"], kind="stable")
             .drop_duplicates(["item_id", "cate_id"]))
    first = pairs.drop_duplicates("item_id")
    clashes = pairs[pairs.duplicated("item_id")]
    if len(clashes):
        clash = clashes.iloc[0]
        earlier = first[first["item_id"] == clash["item_id"]].iloc[0]
        raise DataFormatError(
            f"{parts[clash['file']][0]}:{clash['line']}: item {clash['item_id']!r} has category {clash['cate_id']!r}, "
            f"but {earlier['cate_id']!r} at {parts[earlier['file']][0]}:{earlier['line']}; "
            f"the .item file holds one cate_id per item")
    return Table(first[["item_id", "cate_id"]].reset_index(drop=True), {"item_id": "token", "cate_id": "token"})


def read_reczoo_ctr(paths: list[Path]) -> Benchmark:
    files = files_by_role(paths, {"train": ("train.csv",), "test": ("test.csv",)}, "reczoo-ctr")
    if "main" in files:
        raise DataFormatError(f"{files['main']}: --format reczoo-ctr takes train.csv and test.csv (known by their names)")
    if set(files) != {"train", "test"}:
        raise DataFormatError(f"--format reczoo-ctr needs both train.csv and test.csv, got {', '.join(map(str, paths))}")
    parts, splits, truncated, longest = [], {}, {}, {}
    for split in ("train", "test"):
        frame, lines, lengths = _reczoo_rows(files[split])
        parts.append((files[split], frame, lines, lengths))
        written = pd.DataFrame({"label": frame["label"], "user_id": frame["user_id"], "item_id": frame["item_id"],
                                "item_id_list": _cut_history(frame["item_history"], lengths, RECZOO_HISTORY_CAP)})
        splits[split] = Table(written, {"label": "float", "user_id": "token", "item_id": "token",
                                        "item_id_list": "token_seq"})
        truncated[split] = int((lengths > RECZOO_HISTORY_CAP).sum())
        longest[split] = int(lengths.max())
    item = _item_categories(parts)
    rows = pd.concat([p[1][["label", "user_id"]].assign(length=p[3]) for p in parts], ignore_index=True)
    # The benchmarks are built DIN-style (every prefix of a user's reviews predicts the next one),
    # so a user's longest positive row, history + target, is the user's whole review sequence.
    reviews = int((rows["length"] + 1).where(rows["label"] == 1).groupby(rows["user_id"]).max().sum())
    counts = {"users": int(rows["user_id"].nunique()), "items": len(item.frame),
              "interactions": len(rows), "rows": {s: len(t.frame) for s, t in splits.items()},
              "positives": {s: int(t.frame["label"].sum()) for s, t in splits.items()},
              "target_items": int(pd.concat([t.frame["item_id"] for t in splits.values()]).nunique()),
              "reviews": reviews}
    history = {"field": "item_id_list", "max_length": RECZOO_HISTORY_CAP,
               "truncation": f"post: a longer history keeps its first {RECZOO_HISTORY_CAP} ids (FuxiCTR max_len "
                             f"{RECZOO_HISTORY_CAP}, default padding/truncating 'post')",
               "truncated_rows": truncated, "longest_in_source": longest}
    notes = ["reviews: per user, the longest positive row's history + target (the source is built DIN-style)",
             "items: every id of the targets and of the full histories, each with its cate_id (the .item file)"]
    return Benchmark(splits, item, counts, history, notes)
