"""What a dataset reader returns (:class:`Source`, or :class:`Benchmark` for an already split
source), the atomic :class:`Table` it is written as, and the file helpers every reader shares."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from recbole_ext.errors import DataFormatError


@dataclass
class Table:
    """One atomic file to write: a frame and each column's RecBole type."""

    frame: pd.DataFrame
    types: dict[str, str]


@dataclass
class Source:
    """What a reader got from the input files, before filtering."""

    inter: pd.DataFrame                 # user_id, item_id, [rating], timestamp; time order per user
    inter_types: dict[str, str]
    timestamps: str                     # how the timestamp column was obtained (goes to the meta file)
    item: Table | None = None
    user: Table | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Benchmark:
    """What a reader of an already split source got: RecBole benchmark files, written as they are."""

    splits: dict[str, Table]            # split name -> NAME.<split>.inter, in the source's row order
    item: Table | None
    counts: dict                        # users, items, rows per split, ...: the meta file's "counts"
    history: dict                       # how histories were cut (the meta file's "history")
    notes: list[str] = field(default_factory=list)


def read_text(path: Path, encoding: str = "utf-8") -> str:
    try:
        return path.read_text(encoding=encoding)
    except FileNotFoundError:
        raise DataFormatError(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise DataFormatError(f"{path}: not valid {encoding} text ({error.reason})") from None
    except OSError as error:
        raise DataFormatError(f"{path}: cannot read: {error.strerror or error}") from None


def files_by_role(paths: list[Path], roles: dict[str, tuple[str, ...]], fmt: str) -> dict[str, Path]:
    """Assign each input path a role by its file name; ``roles`` maps role -> name endings."""
    found: dict[str, Path] = {}
    for path in paths:
        name = path.name
        role = next((r for r, endings in roles.items() if any(name.endswith(e) for e in endings)), "main")
        if role in found:
            raise DataFormatError(f"{path}: two {role} inputs for --format {fmt} ({found[role]} and {path})")
        found[role] = path
    return found
