"""RecBole's atomic-file reads through pandas' C parser instead of its Python parser.

``Dataset._load_feat`` (RecBole 1.2.1) calls ``pandas.read_csv(..., engine="python")`` for every
``.inter``/``.item``/``.user`` file, before every run; with the C parser ML-1M's ``create_dataset``
takes a quarter of the time (``benchmarks/startup.py``, docs/performance.md "Start-up").
:func:`read_with_c_tokenizer` uses it only where it must return the Python parser's frame, value
for value: a file both parsers cut into the same fields, floats that both read with the same
function. Everything else (quotes, ragged rows, text or out-of-range numbers in a float column)
goes to the Python parser as before, so RecBole's result and its errors never change.
``tests/data/test_reading.py`` compares the two on every shipped (and, where present, converted)
atomic file and on 800 generated files full of quotes, blanks, odd numbers and line ends.

:func:`patch_atomic_reader` swaps the ``pd`` that RecBole's dataset module sees for a view of pandas
whose only difference is :func:`read_csv`; nothing else in the process is touched.
"""
from __future__ import annotations

import codecs
import types
from pathlib import Path

import numpy as np
import pandas

BLOCK_BYTES = 1 << 24  # file read in 16 MiB blocks for the byte checks
EXACT_INTEGER_LIMIT = 2.0 ** 53  # integers up to here read the same as text or as int64 -> float64


def cuts_the_same_fields(path, delimiter: str, block_bytes: int = BLOCK_BYTES) -> bool:
    """Whether both parsers must cut ``path`` into the same fields: no double quote (their quote
    rules differ), no NUL byte (ends a field in C), no carriage return outside a CRLF line end (a
    line break to one parser and text to the other), and no line with more fields than the header
    (an error to the Python parser, dropped by the C parser under ``usecols``). Read in blocks, so
    memory stays bounded whatever the file's size."""
    try:
        file = open(path, "rb")
    except (OSError, TypeError):  # not a path: leave it to RecBole's own read
        return False
    separator, header_fields = ord(delimiter), None
    line_fields = 0  # separators so far in the line that runs into the next block
    pending_cr = False  # the previous block ended with a carriage return
    empty = True
    with file:
        while block := file.read(block_bytes):
            empty = False
            data = np.frombuffer(block, dtype=np.uint8)
            if (data == ord('"')).any() or (data == 0).any():
                return False
            newlines = np.flatnonzero(data == ord("\n"))
            returns = np.flatnonzero(data == ord("\r"))
            if pending_cr and data[0] != ord("\n"):
                return False
            if returns.size and not np.isin(returns[returns < data.size - 1] + 1, newlines).all():
                return False
            pending_cr = data[-1] == ord("\r")
            separators = np.flatnonzero(data == separator)
            before_each_newline = np.searchsorted(separators, newlines)
            per_line = np.diff(before_each_newline, prepend=0)
            if per_line.size:
                per_line[0] += line_fields
                if header_fields is None:
                    header_fields, per_line = int(per_line[0]), per_line[1:]
                if (per_line > header_fields).any():
                    return False
                line_fields = separators.size - int(before_each_newline[-1])
            else:
                line_fields += separators.size
    if empty or pending_cr:
        return False
    return header_fields is None or line_fields <= header_fields


def is_float64(kind) -> bool:
    """Whether a ``dtype`` entry asks for float64, as RecBole does for a float field (``np.float64``).
    Not ``kind in (np.float64, ...)``: a numpy dtype compares equal to ``None``."""
    return kind is np.float64 or (isinstance(kind, (np.dtype, str)) and str(kind) == "float64")


def read_csv(filepath, *args, engine=None, **kwargs):
    """``pandas.read_csv``; a Python-engine read that :func:`read_with_c_tokenizer` can answer exactly
    is answered there."""
    if engine == "python" and not args:
        frame = read_with_c_tokenizer(filepath, kwargs)
        if frame is not None:
            return frame
    return pandas.read_csv(filepath, *args, engine=engine, **kwargs)


def read_with_c_tokenizer(filepath, kwargs: dict):
    """The frame ``pandas.read_csv(filepath, engine="python", **kwargs)`` returns, or ``None`` where
    this cannot vouch for it.

    Fields: the C parser cuts the same ones as the Python parser, given :func:`cuts_the_same_fields`
    and a one-character delimiter; both turn pandas' NA strings into NaN.

    Floats: the Python parser converts a column with ``lib.maybe_convert_numeric``, whose float
    reader is the C parser's default one (``float_precision="high"``): same bits. Where that
    function refuses a column, the Python parser falls back to Python's ``float()``, whose last bit
    can differ. It refuses what the C parser refuses too (text, ``1e400``: the C parser raises and
    this declines) and integers beyond 64 bits, which the C parser reads as floats; integers are
    exact in both only below 2**53. So a float column with a value of magnitude 2**53 or more
    declines as well.
    """
    delimiter = kwargs.get("delimiter", kwargs.get("sep", ","))
    dtype = kwargs.get("dtype")
    if not (isinstance(delimiter, str) and len(delimiter) == 1 and isinstance(dtype, dict)) \
            or codecs.lookup(kwargs.get("encoding") or "utf-8").name != "utf-8":  # the byte checks assume UTF-8
        return None
    float_columns = [column for column, kind in dtype.items() if is_float64(kind)]
    if any(not is_float64(kind) and kind is not str for kind in dtype.values()) \
            or not cuts_the_same_fields(filepath, delimiter):
        return None
    try:
        frame = pandas.read_csv(filepath, engine="c", float_precision="high", **kwargs)
    except ValueError:  # text in a float column, an out-of-range float: the Python parser decides
        return None
    for column in float_columns:
        values = frame[column].to_numpy()
        if (np.abs(values[np.isfinite(values)]) >= EXACT_INTEGER_LIMIT).any():
            return None
    return frame


class _PandasWithFastAtomicReads(types.ModuleType):
    """pandas, but with this module's :func:`read_csv`."""

    read_csv = staticmethod(read_csv)

    def __getattr__(self, name):
        return getattr(pandas, name)


def patch_atomic_reader() -> None:
    """Point RecBole's dataset module at :class:`_PandasWithFastAtomicReads` (idempotent)."""
    from recbole.data.dataset import dataset as recbole_dataset

    if not isinstance(recbole_dataset.pd, _PandasWithFastAtomicReads):
        recbole_dataset.pd = _PandasWithFastAtomicReads("pandas")
