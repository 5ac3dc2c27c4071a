"""What subnormal weights cost a CPU training step, with and without ``compat.flush_denormals``.

    python benchmarks/denormals.py [--threads 2] [--batch 256] [--steps 3] [--rounds 2] [--json PATH]
    python benchmarks/denormals.py --quick          # smoke: tiny batch, one step, writes nothing

Why: a weight that only weight decay or an L2 term moves shrinks geometrically and ends up
subnormal (below 1.2e-38 in fp32); x86 CPUs compute every product with one through a microcode
assist. Caser's horizontal filters behind a ReLU that stopped firing are such weights: after three
epochs of the ``fearec-t2`` Beauty cell, 37% of their weights were below 1e-30 (3.5% subnormal), and
one validation pass took 255 s instead of the 6.5 s of the epoch before.

The model is ``CaserExt``'s horizontal layer (``models/caser.py``: 50 filter heights, 8 filters each,
over a length-50, d = 64 sequence) with normal initial weights, of which ``--dead`` of the filters
(default a third, rounded to 3 of each height's 8) get subnormal weights, as decayed dead filters do. Timed per variant, each in a fresh
process (the flags must be set before torch starts its threads): a forward pass without gradients
(what validation runs) and a forward + backward + Adam step, median over ``--steps`` after one warm-up.
Variants: ``ieee`` (``RECBOLE_EXT_FLUSH_DENORMALS=0``, IEEE subnormals, torch's default) and
``flushed`` (``import recbole_ext``'s default). Rounds alternate the variants so a busy machine slows
both alike; the ratios are paired within a round.

Writes ``benchmarks/results/denormals.json``; ``--quick`` writes only with ``--json``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

RESULTS = Path(__file__).parent / "results" / "denormals.json"
VARIANTS = {"ieee": "0", "flushed": "1"}  # value of RECBOLE_EXT_FLUSH_DENORMALS
LENGTH, DIM, FILTERS_PER_HEIGHT = 50, 64, 8


def subnormal_floats(shape, generator):
    """Random fp32 subnormals, written as bit patterns (exponent 0): arithmetic would flush them in the
    ``flushed`` variant, and both variants must start from the same bits."""
    import torch

    mantissa = torch.randint(1, 1 << 23, shape, generator=generator, dtype=torch.int32)
    sign = torch.randint(0, 2, shape, generator=generator, dtype=torch.int32) << 31
    return (mantissa | sign).view(torch.float32)


def is_subnormal(values):
    import torch

    bits = values.view(torch.int32)
    return ((bits >> 23) & 0xFF == 0) & (bits & 0x7FFFFF != 0)


def worker(batch: int, steps: int, dead: float, seed: int = 0) -> dict:
    """Time this process's forward and training step; the flags are whatever its import set."""
    import recbole_ext  # noqa: F401  (sets the flags unless RECBOLE_EXT_FLUSH_DENORMALS=0)
    import torch

    from recbole_ext.compat import denormals_flushed_in_all_threads
    from recbole_ext.models.caser import horizontal_features

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    convs = torch.nn.ModuleList(torch.nn.Conv2d(1, FILTERS_PER_HEIGHT, (height, DIM)) for height in range(1, LENGTH + 1))
    n_dead = round(dead * FILTERS_PER_HEIGHT)
    with torch.no_grad():
        for conv in convs:
            conv.weight[:n_dead] = subnormal_floats(conv.weight[:n_dead].shape, generator)
    subnormal_share = float(is_subnormal(torch.cat([conv.weight.flatten() for conv in convs])).float().mean())
    sequence = torch.randn(batch, LENGTH, DIM, generator=generator)
    optimizer = torch.optim.Adam(convs.parameters(), lr=1e-3)

    def forward():
        with torch.no_grad():
            horizontal_features(sequence, convs)

    def train_step():
        optimizer.zero_grad()
        horizontal_features(sequence.requires_grad_(), convs).square().mean().backward()
        optimizer.step()

    timings = {}
    for name, step in (("forward_s", forward), ("train_step_s", train_step)):
        step()
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        timings[name] = statistics.median(times)
    return {**timings, "subnormal_weight_share": subnormal_share, "threads": torch.get_num_threads(),
            "flushed_in_all_threads": denormals_flushed_in_all_threads()}


def run_variant(variant: str, args) -> dict:
    env = {**os.environ, "RECBOLE_EXT_FLUSH_DENORMALS": VARIANTS[variant]}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import denormals; "
            f"print(json.dumps(denormals.worker({args.batch}, {args.steps}, {args.dead})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"benchmarks/denormals.py: the {variant} worker failed: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the workers (0: torch's choice)")
    parser.add_argument("--batch", type=int, default=256, help="sequences per step (fearec-t2's train_batch_size)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant and round, after one warm-up")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of both variants")
    parser.add_argument("--dead", type=float, default=1 / 3, help="share of each height's filters with subnormal weights")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 8, one step, one round")
    parser.add_argument("--json", help=f"write results here (default without --quick: {RESULTS})")
    args = parser.parse_args()
    if args.quick:
        args.batch, args.steps, args.rounds = 8, 1, 1

    from recbole_ext.devices import hardware_label

    rounds = [{variant: run_variant(variant, args) for variant in VARIANTS} for _ in range(args.rounds)]
    summary = {}
    for key in ("forward_s", "train_step_s"):
        ratios = [r["ieee"][key] / r["flushed"][key] for r in rounds]
        summary[key] = {variant: statistics.median(r[variant][key] for r in rounds) for variant in VARIANTS}
        summary[key]["ieee_over_flushed_per_round"] = ratios
    hardware = hardware_label("cpu")
    share = rounds[0]["ieee"]["subnormal_weight_share"]
    print(f"{hardware}; threads {rounds[0]['ieee']['threads']}; batch {args.batch}; subnormal weights {share:.1%}")
    for key, label in (("forward_s", "forward (validation)"), ("train_step_s", "forward+backward+Adam")):
        row = summary[key]
        print(f"{label:<22} ieee {row['ieee']:.3f} s  flushed {row['flushed']:.3f} s  ieee/flushed per round: "
              + ", ".join(f"{ratio:.1f}x" for ratio in row["ieee_over_flushed_per_round"]))
    target = results_target(args.json, args.quick, RESULTS)
    if target:
        write_results(target, {"command": "python " + " ".join(["benchmarks/denormals.py", *sys.argv[1:]]),
                               "hardware": hardware, "batch": args.batch, "steps": args.steps, "dead": args.dead,
                               "subnormal_weight_share": share, "summary": summary, "rounds": rounds})


if __name__ == "__main__":
    main()
