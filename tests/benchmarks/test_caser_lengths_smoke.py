"""Smoke test of benchmarks/caser_lengths.py: RecBole's leave-one-out prefix lengths from both
sequence formats, and all three variants timed on padded batches drawn from them."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def caser_lengths(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    try:
        yield importlib.import_module("caser_lengths")
    finally:
        sys.modules.pop("caser_lengths", None)


def test_prefix_lengths_are_recbole_s_leave_one_out_training_samples(caser_lengths, tmp_path):
    s3rec = tmp_path / "Tiny.txt"
    s3rec.write_text("1 5 6 7 8 9\n2 3 4 5 6\n3 1 2 3\n")
    atomic = tmp_path / "tiny.inter"
    atomic.write_text("user_id:token\titem_id:token\ttimestamp:float\n"
                      + "".join(f"{user}\t{item}\t{item}\n" for user, n in ((1, 5), (2, 4), (3, 3)) for item in range(n)))
    assert caser_lengths.user_sequence_lengths(s3rec) == [5, 4, 3]
    assert sorted(caser_lengths.user_sequence_lengths(atomic)) == [3, 4, 5]
    # 5 items: targets 2..3 from prefixes of 1 and 2; 4 items: one prefix; 3 or fewer: none
    assert caser_lengths.training_prefix_lengths([5, 4, 3, 2]) == [1, 2, 1]
    assert caser_lengths.training_prefix_lengths([60], cap=50)[-8:] == [50] * 8
    assert caser_lengths.resolve_sequences(Path("ml-100k")).name == "ml-100k.inter"
    assert caser_lengths.resolve_sequences(s3rec) == s3rec


def test_every_variant_is_timed_on_batches_padded_to_their_drawn_lengths(caser_lengths):
    batches = caser_lengths.padded_batches([1, 3, 50], batch=6, count=2)
    filled = [(row != 0).sum().item() for batch in batches for row in batch]
    assert set(filled) <= {1, 3, 50} and all(batch.shape == (6, caser_lengths.LENGTH) for batch in batches)
    rounds = caser_lengths.time_variants(batches, steps=1, rounds=2)
    assert [sorted(r) for r in rounds] == [sorted(caser_lengths.VARIANTS)] * 2
    assert all(seconds > 0 for r in rounds for seconds in r.values())


def test_a_missing_or_too_short_sequence_file_exits_with_one_line_naming_it(caser_lengths, tmp_path, monkeypatch):
    missing = tmp_path / "Nowhere.txt"
    monkeypatch.setattr(sys, "argv", ["caser_lengths.py", "--sequences", str(missing), "--quick"])
    with pytest.raises(SystemExit, match=rf"{missing}: no such sequence file"):
        caser_lengths.main()
    short = tmp_path / "Short.txt"
    short.write_text("1 5 6 7\n2 3 4\n")
    monkeypatch.setattr(sys, "argv", ["caser_lengths.py", "--sequences", str(short), "--quick"])
    with pytest.raises(SystemExit, match=rf"{short}: no user has more than 3 items"):
        caser_lengths.main()
