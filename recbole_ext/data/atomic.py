"""Validate RecBole atomic files (``.inter``, ``.item``, ``.user``) before RecBole reads them.

RecBole 1.2.1 (``Dataset._load_feat``) reads the header with ``readline()[:-1]``, splits every
column on ``:`` and feeds the file to ``pandas.read_csv(engine="python")``. A bad file therefore
fails deep inside pandas (or, worse, loads silently wrong: a short row becomes NaN, a missing
header newline cuts the last type). :func:`check_atomic_file` finds these problems first and
reports each as one line ``FILE:LINE: what is wrong``.

No torch, RecBole or pandas import here: ``recbole-ext data check`` stays light.

Checking reads every value in Python, seconds for ML-1M's million rows; runs and reproduction plans
check the same unchanged files again and again. :func:`check_atomic_file_cached` remembers files that
passed by their content (SHA-256, a small fraction of the check's time) in a small JSON file in the
user's cache folder, so only a changed file is read again (docs/performance.md, "Checking data and
reading configs").
"""
from __future__ import annotations

import codecs
import contextlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from recbole_ext.errors import DataFormatError
from recbole_ext.files import atomic_write_bytes, file_sha256

FEATURE_TYPES = ("token", "float", "token_seq", "float_seq")  # RecBole's FeatureType values
# Part of every cache key: raise it when the checker's rules change, so earlier passes are not reused.
CHECKER_VERSION = 1
CACHE_DIR_ENV = "RECBOLE_EXT_CACHE_DIR"
CACHE_OFF = ("off", "none", "0", "false")  # RECBOLE_EXT_CACHE_DIR values that switch the cache off
CACHE_ENTRIES = 256  # the oldest passes are forgotten beyond this
ID_FIELDS = {"inter": ("user_id", "item_id"), "item": ("item_id",), "user": ("user_id",)}
MAX_REPORTED = 20  # a broken 1M-line file must not print 1M lines


@dataclass
class Column:
    name: str
    type: str


@dataclass
class CheckReport:
    """Result of one file's check: its columns, row count and every problem found."""

    path: Path
    columns: list[Column] = field(default_factory=list)
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    more_problems: int = 0  # found beyond MAX_REPORTED

    @property
    def ok(self) -> bool:
        return not self.problems

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def add(self, line: int | None, message: str) -> None:
        if len(self.problems) >= MAX_REPORTED:
            self.more_problems += 1
            return
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        self.problems.append(f"{where}: {message}")

    def summary(self) -> str:
        """The first problem, plus how many others (one line, for exceptions)."""
        extra = len(self.problems) - 1 + self.more_problems
        suffix = f" (and {extra} more; run 'recbole-ext data check {self.path}')" if extra else ""
        return self.problems[0] + suffix

    def raise_if_failed(self) -> None:
        if self.problems:
            raise DataFormatError(self.summary())


def file_kind(path: str | os.PathLike) -> str | None:
    """``inter``/``item``/``user`` from the suffix (``x.train.inter`` is ``inter``), else None."""
    suffix = Path(path).suffix.lstrip(".")
    return suffix if suffix in ID_FIELDS else None


def _show(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_header(report: CheckReport, header: str, sep: str, id_fields: tuple[str, ...]) -> None:
    if header.strip() == "":
        report.add(1, "empty header line; expected 'name:type' columns such as 'user_id:token'")
        return
    specs = header.split(sep)
    seen: set[str] = set()
    for number, spec in enumerate(specs, start=1):
        if spec.count(":") != 1:
            hint = ""
            if any(other in spec for other in (",", ";", " ", "\t") if other != sep):
                hint = f" (columns must be separated by {sep!r}; this looks like another separator)"
            elif spec == "":
                hint = " (empty column: doubled or trailing separator?)"
            report.add(1, f"header column {number} {_show(spec)} is not 'name:type'{hint}")
            continue
        name, type_ = spec.split(":")
        if not name or name != name.strip():
            report.add(1, f"header column {number} {_show(spec)} has an empty or space-padded name")
            continue
        if type_ not in FEATURE_TYPES:
            report.add(1, f"header column {number} {name!r} has unknown type {type_!r}; "
                          f"known: {', '.join(FEATURE_TYPES)}")
            continue
        if name in seen:
            report.add(1, f"duplicate header name {name!r} (column {number})")
            continue
        seen.add(name)
        report.columns.append(Column(name, type_))
    if report.problems:
        return
    for id_field in id_fields:
        types = {c.name: c.type for c in report.columns}
        if id_field not in types:
            report.add(1, f"no {id_field!r} column (header has {', '.join(types) or 'none'}); "
                          f"RecBole needs it to identify {'users' if 'user' in id_field else 'items'}")
        elif types[id_field] != "token":
            report.add(1, f"column {id_field!r} has type {types[id_field]!r}; ids must be 'token'")


def _check_value(report: CheckReport, line_no: int, column: Column, value: str, seq_sep: str,
                 is_id: bool) -> None:
    if value.startswith('"'):
        # pandas treats a leading double quote as an opening quote and may swallow separators and
        # newlines up to the next quote, silently merging rows.
        report.add(line_no, f"column {column.name!r} starts with a double quote ({_show(value)}), which "
                            f"pandas reads as a quoted field; remove the quote")
        return
    if column.type == "float":
        if value.strip() == "":
            report.add(line_no, f"empty value in float column {column.name!r}")
            return
        _check_number(report, line_no, column, value)
    elif column.type == "float_seq":
        for part in filter(None, value.split(seq_sep)):
            if not _check_number(report, line_no, column, part):
                return
    elif is_id and value.strip() == "":
        report.add(line_no, f"empty {column.name!r}")



def _check_number(report, line_no: int, column, text: str) -> bool:
    """Report ``text`` unless it is a finite number; returns whether it was."""
    try:
        number = float(text)
    except ValueError:
        report.add(line_no, f"column {column.name!r} ({column.type}): {_show(text)} is not a number")
        return False
    if not math.isfinite(number):
        report.add(line_no, f"column {column.name!r}: {_show(text)} is not a finite number")
        return False
    return True

def _decode(report: CheckReport, line_no: int, raw: bytes, encoding: str) -> str | None:
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as error:
        report.add(line_no, f"not valid {encoding} text ({error.reason}); set 'encoding' in the config "
                            f"or re-encode the file")
        return None


def check_atomic_file(path: str | os.PathLike, *, kind: str | None = None, field_separator: str = "\t",
                      seq_separator: str = " ", encoding: str = "utf-8",
                      id_fields: tuple[str, ...] | None = None) -> CheckReport:
    """Check one atomic file; never raises for bad content (problems go into the report).

    ``kind`` (``inter``/``item``/``user``, default from the suffix) decides which id columns must
    exist; ``id_fields`` overrides them (RecBole's USER_ID_FIELD / ITEM_ID_FIELD).
    """
    path = Path(path)
    report = CheckReport(path)
    kind = kind or file_kind(path)
    if id_fields is None:
        id_fields = ID_FIELDS.get(kind or "", ())
    if not path.is_file():
        report.add(None, "no such file")
        return report
    try:
        codecs.lookup(encoding)
    except LookupError:
        report.add(None, f"unknown encoding {encoding!r}")
        return report
    try:
        # Bytes, decoded line by line, so a decoding error names its line. CRLF reads as LF, as in
        # RecBole's text-mode open().
        handle = open(path, "rb")
    except OSError as error:
        report.add(None, f"cannot open: {error.strerror or error}")
        return report
    sep = field_separator
    with handle:
        lines = iter(handle)
        header_bytes = next(lines, b"")
        if header_bytes == b"":
            report.add(None, "empty file; expected a header such as 'user_id:token\\titem_id:token'")
            return report
        if not header_bytes.endswith(b"\n"):
            # RecBole strips the header's last character unconditionally (readline()[:-1]).
            report.add(1, "the header line has no newline (RecBole would cut the last type's last "
                          "character) and the file has no rows")
            return report
        header = _decode(report, 1, header_bytes, encoding)
        if header is None:
            return report
        if "\x00" in header:
            report.add(1, "NUL byte in the header (binary or UTF-16 file?)")
            return report
        _parse_header(report, header, sep, id_fields)
        if report.problems:
            return report  # the rows cannot be interpreted without a valid header
        columns = report.columns
        width = len(columns)
        id_positions = {i for i, c in enumerate(columns) if c.name in id_fields}
        checked = [(i, c) for i, c in enumerate(columns) if c.type != "token" or i in id_positions]
        for line_no, raw in enumerate(lines, start=2):
            line = _decode(report, line_no, raw, encoding)
            if line is None:
                continue
            if line == "":
                continue  # pandas skips blank lines
            if "\x00" in line:
                report.add(line_no, "NUL byte in the row")
                continue
            values = line.split(sep)
            if len(values) != width:
                report.add(line_no, f"{len(values)} columns, the header has {width} (separator {sep!r})")
                continue
            report.rows += 1
            for index, column in checked:
                _check_value(report, line_no, column, values[index], seq_separator, index in id_positions)
            if report.more_problems > 10 * MAX_REPORTED:
                break  # enough evidence; do not scan a hopeless file to the end
    if report.rows == 0 and not report.problems and kind == "inter":
        report.add(None, "no interaction rows after the header")
    return report


def read_header(path: str | os.PathLike, field_separator: str = "\t", encoding: str = "utf-8") -> list[Column]:
    """The columns of a checked file's header (raises :class:`DataFormatError` if it is invalid)."""
    report = CheckReport(Path(path))
    try:
        with open(path, "r", encoding=encoding) as handle:
            header = handle.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError) as error:
        raise DataFormatError(f"{path}: cannot read the header: {error}") from None
    _parse_header(report, header, field_separator, ())
    report.raise_if_failed()
    return report.columns


def check_cache_path() -> Path | None:
    """Where passed checks are remembered: ``$RECBOLE_EXT_CACHE_DIR``, else the XDG cache folder
    (``~/.cache/recbole-ext``); ``None`` when ``$RECBOLE_EXT_CACHE_DIR`` is ``off``: every check
    reads its file and nothing is written."""
    root = os.environ.get(CACHE_DIR_ENV)
    if root and root.strip().lower() in CACHE_OFF:
        return None
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "recbole-ext")
    return Path(root) / "atomic-checks.json"


def _content_key(path: Path, options: dict) -> str | None:
    try:
        digest = file_sha256(path)
    except OSError:
        return None  # the real check reports it
    return f"{digest} {json.dumps({**options, 'checker': CHECKER_VERSION}, sort_keys=True)}"


def _read_cache(cache: Path) -> dict:
    try:
        entries = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}  # none yet, unreadable or damaged: start afresh
    return entries if isinstance(entries, dict) else {}


def _remember(cache: Path, key: str, report: CheckReport) -> None:
    """Add a passed check; a cache that cannot be written is no error (it only saves time)."""
    entries = _read_cache(cache)
    entries.pop(key, None)
    entries[key] = {"rows": report.rows, "columns": [[c.name, c.type] for c in report.columns]}
    text = json.dumps(dict(list(entries.items())[-CACHE_ENTRIES:])).encode()
    with contextlib.suppress(OSError):  # concurrent runs never read half a file: written whole, then renamed
        atomic_write_bytes(cache, lambda handle: handle.write(text))


def _cached_report(path: Path, entry) -> CheckReport | None:
    try:
        return CheckReport(path, [Column(str(name), str(type_)) for name, type_ in entry["columns"]], int(entry["rows"]))
    except (TypeError, KeyError, ValueError):
        return None  # a damaged entry is a miss


def check_atomic_file_cached(path: str | os.PathLike, *, kind: str | None = None, field_separator: str = "\t",
                             seq_separator: str = " ", encoding: str = "utf-8",
                             id_fields: tuple[str, ...] | None = None) -> CheckReport:
    """:func:`check_atomic_file`, answered from the cache when a file with the same bytes passed
    under the same options before. Failures are never cached: a bad file is read and reported in full."""
    path = Path(path)
    kind = kind or file_kind(path)
    # the options check_atomic_file acts on, defaults spelled out, so equal checks share one key
    options = {"kind": kind, "field_separator": field_separator, "seq_separator": seq_separator, "encoding": encoding,
               "id_fields": list(ID_FIELDS.get(kind or "", ()) if id_fields is None else id_fields)}
    cache = check_cache_path()
    key = _content_key(path, options) if cache is not None and path.is_file() else None
    known = _cached_report(path, _read_cache(cache).get(key)) if key else None
    if known is not None:
        return known
    report = check_atomic_file(path, kind=kind, field_separator=field_separator, seq_separator=seq_separator,
                               encoding=encoding, id_fields=id_fields)
    # the bytes hashed must be the bytes checked: a file rewritten meanwhile is not remembered
    if report.ok and key and _content_key(path, options) == key:
        _remember(cache, key, report)
    return report
