"""Our atomic-file reader returns what RecBole's own read (pandas' Python parser) returns: the same
frame, or the same error, on real files and on generated files built to break the C parser; and it
does use the C parser on the files it should, so these comparisons test something."""
from __future__ import annotations

import glob
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import recbole
from recbole.data import create_dataset

from recbole_ext.data import reading
from recbole_ext.data.reading import cuts_the_same_fields, read_csv, read_with_c_tokenizer

from ..conftest import tiny_recbole_config

ROOT = Path(__file__).resolve().parents[2]
ML100K = sorted(glob.glob(str(Path(recbole.__file__).parent / "dataset_example" / "ml-100k" / "*")))
CONVERTED = sorted(path for pattern in ("*.inter", "*.item", "*.user")
                   for path in glob.glob(str(ROOT / "dataset_atomic" / "*" / pattern)))


def recbole_read_arguments(path, **overrides) -> dict:
    """The arguments ``Dataset._load_feat`` passes for a file, every column loaded."""
    with open(path, encoding="utf-8") as file:
        columns = file.readline().rstrip("\r\n").split("\t")
    dtype = {column: np.float64 if column.endswith(":float") else str for column in columns}
    return {"delimiter": "\t", "usecols": columns, "dtype": dtype, "encoding": "utf-8", **overrides}


def read_both(path, arguments):
    """(RecBole's result, ours): each a frame or the raised exception's type."""
    results = []
    for reader in (pd.read_csv, read_csv):
        try:
            results.append(reader(path, engine="python", **arguments))
        except Exception as error:  # noqa: BLE001 - the comparison is the point
            results.append(type(error))
    return results


def assert_same(path, arguments):
    theirs, ours = read_both(path, arguments)
    if isinstance(theirs, pd.DataFrame) and isinstance(ours, pd.DataFrame):
        pd.testing.assert_frame_equal(theirs, ours, check_exact=True)
    else:
        assert theirs == ours, Path(path).read_bytes()[:300]


@pytest.mark.parametrize("path", ML100K, ids=lambda path: Path(path).name)
def test_recboles_ml100k_files_read_the_same_through_the_c_parser(path):
    arguments = recbole_read_arguments(path)
    assert read_with_c_tokenizer(path, arguments) is not None
    assert_same(path, arguments)


@pytest.mark.skipif(not CONVERTED, reason="no converted datasets in dataset_atomic/ (recbole-ext data convert)")
@pytest.mark.parametrize("path", CONVERTED, ids=lambda path: str(Path(path).relative_to(ROOT / "dataset_atomic")))
def test_converted_datasets_read_the_same(path):
    assert_same(path, recbole_read_arguments(path))


# Pieces that break parsers: quotes, NA spellings, NUL, lone carriage returns, odd numbers.
TOKEN_PIECES = ["a", "b", "1", "0", "-", ".", "e", "E", "+", " ", '"', "'", "#", "\\", ",", ";", "\r", "NA",
                "nan", "null", "None", "N/A", "inf", "é", "中", "\x00", "  ", "1.5", "1e400", "0x1", "_"]
ODD_NUMBERS = ["", " 1.5", "1.5 ", "nan", "NaN", "inf", "-inf", "1e400", "+2", "NA", "N/A",
               "123456789012345678901234567890", "-9223372036854775809", "18446744073709551615",
               "9007199254740993", "True", "false", "1_0", "\ufeff1", "0x1f", "١", "  ", "-", ".", "e5"]
TYPES = ["token", "float", "token_seq", "float_seq"]


def random_number(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(ODD_NUMBERS)
    value = rng.choice([rng.random() * 10.0 ** rng.randint(-300, 300), rng.uniform(-1, 1),
                        float(rng.randint(-10 ** 9, 10 ** 9))])
    return rng.choice(["%r", "%.17g", "%.3f", "%.25f", "%e", "%.20e", "%.0f"]) % value


def random_atomic_file(rng: random.Random, hostile: bool) -> tuple[str, list[str]]:
    """An atomic file's text (sometimes ragged, CRLF or with blank lines) and the columns to load;
    ``hostile`` files may hold quotes, NULs and lone carriage returns in their tokens."""
    types = ["token"] + [rng.choice(TYPES) for _ in range(rng.randint(1, 4))]
    names = ["user_id"] + [f"c{i}" for i in range(len(types) - 1)]
    header = [f"{name}:{kind}" for name, kind in zip(names, types)]

    def value(kind):
        if kind == "float":
            return random_number(rng)
        if kind == "float_seq":
            return " ".join(random_number(rng) for _ in range(rng.randint(0, 3)))
        text = "".join(rng.choice(TOKEN_PIECES) for _ in range(rng.randint(0, 4)))
        return text if hostile else text.replace('"', "").replace("\x00", "").replace("\r", "")

    rows = []
    for _ in range(rng.randint(0, 30)):
        fields = [value(kind) for kind in types]
        if rng.random() < 0.02:
            fields = fields[:-1]
        if rng.random() < 0.02:
            fields.append("x")
        rows.append("\t".join(fields))
    end = rng.choice(["\n", "\r\n"])
    text = end.join(["\t".join(header)] + rows) + (end if rng.random() < 0.8 else "")
    if rng.random() < 0.1:
        text += end * 2
    return text, [column for column in header if rng.random() < 0.8]


@pytest.mark.parametrize("hostile", [False, True], ids=["plain", "hostile"])
def test_generated_files_read_the_same_or_fail_the_same(tmp_path, hostile):
    rng = random.Random(int(hostile))
    path = tmp_path / "generated.inter"
    through_c = 0
    for _ in range(400):
        text, loaded = random_atomic_file(rng, hostile)
        path.write_text(text, encoding="utf-8", newline="")
        arguments = recbole_read_arguments(path, usecols=loaded,
                                           dtype={c: np.float64 if c.endswith(":float") else str for c in loaded})
        assert_same(path, arguments)
        assert cuts_the_same_fields(path, "\t", block_bytes=7) == cuts_the_same_fields(path, "\t")
        through_c += read_with_c_tokenizer(path, arguments) is not None
    print(f"{through_c} of 400 through the C parser")
    assert through_c >= (20 if hostile else 100)  # the C parser answered a share: the comparisons covered it


HEADER = "user_id:token\tr:float\n"


@pytest.mark.parametrize("body", [
    '"1"\t2\n',  # quotes: the parsers' rules differ
    "1\x00\t2\n",  # NUL ends a field in C
    "1\r2\t3\n",  # a lone carriage return: a line break to one parser only
    "1\t2\tx\n",  # more fields than the header: an error to the Python parser
    "1\t123456789012345678901234567890\n",  # beyond 64 bits: the Python parser's float() path
    "1\t9007199254740993\n",  # 2**53 + 1: integer and float readings may round apart
    "1\t1e400\n",
    "1\tTrue\n",
    "1\tabc\n",
], ids=["quote", "nul", "bare-cr", "extra-field", "huge-integer", "2**53+1", "overflow", "bool", "text"])
def test_files_the_c_parser_cannot_vouch_for_go_to_the_python_parser(tmp_path, body):
    path = tmp_path / "declined.inter"
    path.write_bytes((HEADER + "1\t0.5\n" + body).encode("utf-8"))
    arguments = recbole_read_arguments(path)
    assert read_with_c_tokenizer(path, arguments) is None
    assert_same(path, arguments)


def test_other_encodings_and_separators_go_to_the_python_parser(tmp_path):
    path = tmp_path / "plain.inter"
    path.write_text(HEADER + "1\t0.5\n", encoding="utf-8")
    assert read_with_c_tokenizer(path, recbole_read_arguments(path)) is not None
    assert read_with_c_tokenizer(path, recbole_read_arguments(path, encoding="latin-1")) is None
    assert read_with_c_tokenizer(path, recbole_read_arguments(path, delimiter="::")) is None
    assert read_with_c_tokenizer(path, recbole_read_arguments(path, dtype=str)) is None
    assert read_with_c_tokenizer(path, recbole_read_arguments(path, dtype={"user_id:token": str, "r:float": None})) is None
    assert read_with_c_tokenizer(path, recbole_read_arguments(path, dtype={"user_id:token": str, "r:float": "float64"})) \
        is not None


@pytest.mark.parametrize("block_bytes", [1, 2, 3, 5, 1 << 24])
def test_field_cutting_check_at_any_block_size(tmp_path, block_bytes):
    path = tmp_path / "cut.inter"
    cases = {"a\tb\r\n1\t2\r\n": True, "a\tb\n1\t2": True, "a\tb\n1\n\n": True, "a\tb": True, "": False,
             "a\tb\n1\t2\t3\n": False, "a\tb\n1\t2\t3": False, "a\tb\n1\r\n2\r": False,
             "a\tb\n1\r2\n": False, "a\tb\r\r\n": False, 'a\tb\n1\t"2"\n': False, "a\tb\n1\x002\n": False,
             "a\tb\tc\n1\t2\t3\n1\t2\n\t\t\n": True}
    for text, expected in cases.items():
        path.write_bytes(text.encode())
        assert cuts_the_same_fields(path, "\t", block_bytes=block_bytes) is expected, text
    assert not cuts_the_same_fields(tmp_path / "missing.inter", "\t")


def test_recbole_reads_its_atomic_files_through_the_c_parser(monkeypatch):
    answered = []
    original = reading.read_with_c_tokenizer

    def spy(path, arguments):
        frame = original(path, arguments)
        answered.append(frame is not None)
        return frame

    monkeypatch.setattr(reading, "read_with_c_tokenizer", spy)
    create_dataset(tiny_recbole_config())
    assert answered and all(answered)
