"""Caser's horizontal layer on a real dataset's sequence lengths: RecBole's loop, ``CaserExt`` over
every window, and ``CaserExt`` over each sequence's own windows.

    python benchmarks/caser_lengths.py [--sequences PATH] [--threads 2] [--batch 256] [--steps 5]
                                       [--rounds 2] [--json PATH]
    python benchmarks/caser_lengths.py --quick       # smoke: tiny batch, one step, writes nothing

Why: a batch is padded to L = 50 items, but on Amazon data most training sequences are a handful of
items long (leave-one-out prefixes of 5-core users). Windows that start past a sequence's last item
see only the padding row, so ``horizontal_features(..., item_seq=...)`` computes each sequence's
windows from its own length (``models/caser.py``); how much that saves depends on the lengths, so
they come from a dataset.

``--sequences``: an S3-Rec sequence file (``user item item ...`` per line, oldest first; default
Clothing from ``../shared/datasets``) or a RecBole ``.inter`` atomic file (``ml-100k``: the recbole
wheel's, also the default where the first is missing). Each user of m items gives RecBole's leave-one-out training
prefixes, lengths 1..m − 3, capped at L; batches draw from them uniformly, as a shuffled loader does.
Timed: forward + backward of the layer alone (d 64, 8 filters per height, fearec-t2's batch 256), the
median over ``--steps`` after one warm-up per variant and round; rounds alternate the variant order,
and ratios are paired within a round.

Writes ``benchmarks/results/caser_lengths_<dataset>.json``; ``--quick`` writes only with ``--json``.
"""
from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

ROOT = Path(__file__).resolve().parent.parent
CLOTHING = ROOT.parent / "shared" / "datasets" / "raw" / "Amazon_Clothing_Shoes_and_Jewelry" / "Clothing.txt"
LENGTH, DIM, FILTERS_PER_HEIGHT, N_ITEMS = 50, 64, 8, 1000
VARIANTS = ("recbole", "all_windows", "own_windows")


def ml100k_inter() -> Path:
    import recbole

    return Path(recbole.__file__).parent / "dataset_example" / "ml-100k" / "ml-100k.inter"


def resolve_sequences(given: Path | None) -> Path:
    """``--sequences``: a path, ``ml-100k`` (the recbole wheel's copy), or by default Clothing where
    ../shared/datasets has it and ml-100k where not."""
    if given is None:
        return CLOTHING if CLOTHING.exists() else ml100k_inter()
    return ml100k_inter() if str(given) == "ml-100k" else given


def user_sequence_lengths(path: Path) -> list[int]:
    """Items per user: from an S3-Rec file's lines, or by counting an atomic file's user column."""
    if path.suffix != ".inter":
        with path.open() as lines:
            return [len(line.split()) - 1 for line in lines if line.strip()]
    counts: dict[str, int] = defaultdict(int)
    with path.open(newline="") as rows:
        reader = csv.reader(rows, delimiter="\t")
        user_column = next(reader).index("user_id:token")
        for row in reader:
            counts[row[user_column]] += 1
    return list(counts.values())


def training_prefix_lengths(user_lengths: list[int], cap: int = LENGTH) -> list[int]:
    """RecBole's leave-one-out training samples: a user of m items predicts items 2..m − 2 from the
    1..m − 3 items before each (the last two are validation and test targets)."""
    return [min(prefix, cap) for m in user_lengths for prefix in range(1, m - 2)]


def padded_batches(prefix_lengths: list[int], batch: int, count: int, seed: int = 0):
    import torch

    sampler, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = torch.tensor(sampler.choices(prefix_lengths, k=batch))
        items = torch.randint(1, N_ITEMS, (batch, LENGTH), generator=generator)
        batches.append(items * (torch.arange(LENGTH) < lengths.unsqueeze(1)))  # right-padded with 0, as RecBole's
    return batches


def time_variants(batches, steps: int, rounds: int, seed: int = 0) -> list[dict]:
    import torch

    from recbole_ext.models.caser import horizontal_features

    torch.manual_seed(seed)
    embedding = torch.nn.Embedding(N_ITEMS, DIM, padding_idx=0)
    torch.nn.init.normal_(embedding.weight, 0, 1 / DIM)  # RecBole's Caser init, padding row included
    convs = torch.nn.ModuleList(torch.nn.Conv2d(1, FILTERS_PER_HEIGHT, (height, DIM)) for height in range(1, LENGTH + 1))

    def recbole_loop(item_seq_emb, item_seq):
        # RecBole's caser.py forward: one Conv2d, ReLU and max-pool per height
        columns = item_seq_emb.unsqueeze(1)
        return torch.cat([torch.relu(conv(columns).squeeze(3)).amax(dim=2) for conv in convs], dim=1)

    layers = {"recbole": recbole_loop,
              "all_windows": lambda emb, item_seq: horizontal_features(emb, convs),
              "own_windows": lambda emb, item_seq: horizontal_features(emb, convs, item_seq=item_seq)}

    def step(variant, item_seq):
        embedding.zero_grad(), convs.zero_grad()
        layers[variant](embedding(item_seq), item_seq).square().mean().backward()

    results = []
    for round_index in range(rounds):
        order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
        timings = {}
        for variant in order:
            step(variant, batches[0])
            times = []
            for item_seq in batches[1:steps + 1]:
                started = time.perf_counter()
                step(variant, item_seq)
                times.append(time.perf_counter() - started)
            timings[variant] = statistics.median(times)
        results.append(timings)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=Path, default=None, help="S3-Rec sequence file, RecBole .inter file, or ml-100k")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--batch", type=int, default=256, help="sequences per step (fearec-t2's train_batch_size)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant and round, after one warm-up")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating the variant order")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 8, one step, one round")
    parser.add_argument("--json", help="write results here (default without --quick: benchmarks/results/caser_lengths_<dataset>.json)")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.steps, args.rounds = 8, 1, 1
    sequences = resolve_sequences(args.sequences)
    if not sequences.exists():
        raise SystemExit(f"benchmarks/caser_lengths.py: {sequences}: no such sequence file")

    import torch

    import recbole_ext  # noqa: F401  (flushes subnormals, as a training run does)
    from recbole_ext.devices import hardware_label

    torch.set_num_threads(args.threads)
    prefixes = training_prefix_lengths(user_sequence_lengths(sequences))
    if not prefixes:
        raise SystemExit(f"benchmarks/caser_lengths.py: {sequences}: no user has more than 3 items")
    rounds = time_variants(padded_batches(prefixes, args.batch, args.steps + 1), args.steps, args.rounds)
    summary = {variant: statistics.median(r[variant] for r in rounds) for variant in VARIANTS}
    for baseline in ("recbole", "all_windows"):
        summary[f"{baseline}_over_own_windows_per_round"] = [r[baseline] / r["own_windows"] for r in rounds]
    hardware = hardware_label("cpu")
    mean_length = statistics.fmean(prefixes)
    print(f"{hardware}; threads {torch.get_num_threads()}; batch {args.batch}; {sequences.name}: "
          f"{len(prefixes)} training sequences, mean length {mean_length:.2f} (cap {LENGTH})")
    for variant in VARIANTS:
        print(f"{variant:<12} {summary[variant]:.4f} s/step")
    for baseline in ("recbole", "all_windows"):
        print(f"{baseline} / own_windows per round: "
              + ", ".join(f"{ratio:.2f}x" for ratio in summary[f"{baseline}_over_own_windows_per_round"]))
    dataset = sequences.stem.lower().replace(".", "_")
    target = results_target(args.json, args.quick, Path(__file__).parent / "results" / f"caser_lengths_{dataset}.json")
    if target:
        write_results(target, {"command": "python " + " ".join(["benchmarks/caser_lengths.py", *sys.argv[1:]]),
                               "hardware": hardware, "threads": torch.get_num_threads(), "batch": args.batch,
                               "steps": args.steps, "sequences": sequences.name, "training_sequences": len(prefixes),
                               "mean_length": mean_length, "summary": summary, "rounds": rounds})


if __name__ == "__main__":
    main()
