"""Generate the synthetic datasets we ship (nothing here comes from a real dataset).

    python scripts/make_fixtures.py            # (re)write the files below
    python scripts/make_fixtures.py --check    # exit 1 if a committed file differs from a fresh run

- ``dataset_atomic/tiny-seq/``: 300 users, a few thousand interactions in RecBole atomic format
  (``.inter`` with timestamps, ``.item`` with a ``categories:token_seq`` feature). Users walk a
  fixed random item graph, so sequential models have a next-item signal to learn. Used by tests
  and the README demo.
- ``tests/data/fixtures/``: one small set of interactions (40 users) written in every source format
  the converters read (S3-Rec, SASRec, ML-seq, GroupLens ``::`` and ml-100k ``u.*``), so tests can
  check that each converter recovers exactly these interactions.

Deterministic: a fixed seed and no dependence on the platform, so ``--check`` is stable.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TINY_SEQ = ROOT / "dataset_atomic" / "tiny-seq"
RAW = ROOT / "tests" / "data" / "fixtures"
GENRES = ("Action", "Comedy", "Drama", "Children's", "Sci-Fi", "Film-Noir")
ML100K_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                 "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                 "War", "Western")
DAY = 86400
START = 978_300_000  # an ML-1M-like epoch second


def tiny_seq_files() -> dict[Path, str]:
    rng = np.random.default_rng(20240607)
    n_users, n_items = 300, 120
    successors = rng.integers(1, n_items + 1, size=(n_items + 1, 3))  # each item leads to 3 likely next items
    inter = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    for user in range(1, n_users + 1):
        length = int(rng.integers(5, 31))
        item = int(rng.integers(1, n_items + 1))
        when = START + int(rng.integers(0, 365)) * DAY
        for _ in range(length):
            inter.append(f"u{user}\ti{item}\t{int(rng.integers(1, 6))}\t{when}")
            when += int(rng.integers(1, 5 * DAY))
            item = int(successors[item, rng.integers(0, 3)]) if rng.random() < 0.8 else int(rng.integers(1, n_items + 1))
    items = ["item_id:token\tcategories:token_seq"]
    for item in range(1, n_items + 1):
        cats = sorted({f"c{int(c)}" for c in rng.integers(1, 16, size=int(rng.integers(1, 4)))})
        items.append(f"i{item}\t{' '.join(cats)}")
    return {TINY_SEQ / "tiny-seq.inter": "\n".join(inter) + "\n",
            TINY_SEQ / "tiny-seq.item": "\n".join(items) + "\n"}


def raw_events(rng) -> list[tuple[int, int, int, int]]:
    """(user, item, rating, timestamp) in time order per user; users in id order.

    40 users, items 1..30 with a skewed popularity, so 5-cores remove something; gaps are whole
    days and sometimes 0 (ties), like the S3-Rec time-interval files.
    """
    weights = 1.0 / np.arange(1, 31) ** 0.8
    weights /= weights.sum()
    events = []
    for user in range(1, 41):
        length = int(rng.integers(3, 16))
        items = rng.choice(np.arange(1, 31), size=length, replace=False, p=weights)
        when = START + int(rng.integers(0, 100)) * DAY
        for position, item in enumerate(items):
            if position:
                when += int(rng.choice([0, 1, 2, 7, 30])) * DAY
            events.append((user, int(item), int(rng.integers(1, 6)), when))
    return events


def raw_files() -> dict[Path, str]:
    rng = np.random.default_rng(7)
    events = raw_events(rng)
    by_user: dict[int, list[tuple[int, int, int, int]]] = {}
    for event in events:
        by_user.setdefault(event[0], []).append(event)
    files: dict[Path, str] = {}
    # S3-Rec: sequences, the same with intervals, item attributes (not every item has some).
    seq_lines = [f"{u} " + " ".join(str(e[1]) for e in evs) for u, evs in by_user.items()]
    files[RAW / "s3rec" / "Tiny.txt"] = "\n".join(seq_lines) + "\n"
    interval_lines = []
    for user, evs in by_user.items():
        gaps = [0] + [evs[i][3] - evs[i - 1][3] for i in range(1, len(evs))]
        interval_lines.append(f"{user} " + " ".join(str(e[1]) for e in evs) + "\t" + " ".join(map(str, gaps)))
    files[RAW / "s3rec" / "Tiny_with_time_intervals.txt"] = "\n".join(interval_lines) + "\n"
    attributes = {str(i): sorted({int(a) for a in rng.integers(1, 9, size=int(rng.integers(1, 4)))})
                  for i in range(1, 31) if i % 7}
    files[RAW / "s3rec" / "Tiny_item2attributes.json"] = json.dumps(attributes) + "\n"
    # SASRec: 'user item' lines; interleave users (round robin) to test per-user order keeping.
    rows, queues = [], [list(evs) for evs in by_user.values()]
    while any(queues):
        for queue in queues:
            if queue:
                user, item, _, _ = queue.pop(0)
                rows.append(f"{user} {item}")
    files[RAW / "sasrec" / "tiny.txt"] = "\n".join(rows) + "\n"
    # ML-seq: MovieLens-like ids (users 1..40, movies = 1000 + item), movies.dat, users.dat.
    files[RAW / "ml-seq" / "tiny_seq.txt"] = "\n".join(
        f"{u} " + " ".join(str(1000 + e[1]) for e in evs) for u, evs in by_user.items()) + "\n"
    movies = []
    for item in range(1, 33):  # 31 and 32 are never rated: a .item file may list unrated movies
        genres = [GENRES[(item * k) % len(GENRES)] for k in (1, 2)][: 1 + item % 2]
        movies.append(f"{1000 + item}::Movie {item} ({1980 + item})::{'|'.join(dict.fromkeys(genres))}")
    files[RAW / "ml-seq" / "movies.dat"] = "\n".join(movies) + "\n"
    users = [f"{u}::{'MF'[u % 2]}::{[1, 18, 25, 35][u % 4]}::{u % 21}::{10000 + u}" for u in range(1, 41)]
    files[RAW / "ml-seq" / "users.dat"] = "\n".join(users) + "\n"
    # GroupLens ratings.dat (time-shuffled file order, as the real one is not per-user sorted) ...
    shuffled = [events[i] for i in rng.permutation(len(events))]
    files[RAW / "grouplens" / "ratings.dat"] = "\n".join(
        f"{u}::{1000 + i}::{r}::{t}" for u, i, r, t in shuffled) + "\n"
    files[RAW / "grouplens" / "movies.dat"] = files[RAW / "ml-seq" / "movies.dat"]
    files[RAW / "grouplens" / "users.dat"] = files[RAW / "ml-seq" / "users.dat"]
    # ... and ml-100k's u.data / u.item / u.user.
    files[RAW / "ml-100k" / "u.data"] = "\n".join(f"{u}\t{i}\t{r}\t{t}" for u, i, r, t in shuffled) + "\n"
    u_item = []
    for item in range(1, 31):
        flags = ["1" if (item + g) % 6 == 0 else "0" for g in range(len(ML100K_GENRES))]
        u_item.append(f"{item}|Movie {item} ({1980 + item})|01-Jan-{1980 + item}||http://example.org/{item}|"
                      + "|".join(flags))
    files[RAW / "ml-100k" / "u.item"] = "\n".join(u_item) + "\n"
    files[RAW / "ml-100k" / "u.user"] = "\n".join(
        f"{u}|{20 + u}|{'MF'[u % 2]}|student|{10000 + u}" for u in range(1, 41)) + "\n"
    return files


def all_files() -> dict[Path, str]:
    return {**tiny_seq_files(), **raw_files()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in all_files().items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in stale:
        print(f"{path.relative_to(ROOT)}: differs from a fresh 'python scripts/make_fixtures.py'", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
