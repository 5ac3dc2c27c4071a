"""Training-step time of every paper model against RecBole's SASRec and FEARec, on CPU or CUDA.

    python benchmarks/model_steps.py [--device cpu|cuda] [--models SASRec,FEARec,SeqTransformer,...]
                                     [--precision fp32,bf16] [--compile] [--rounds 3] [--settle 5] [--steps 8]
                                     [--batch 2048] [--length 50] [--one-process] [--set KEY=VALUE ...]
                                     [--compile-mode ...] [--json PATH] [--quick]

ml-100k (RecBole ships it), ``MAX_ITEM_LIST_LENGTH`` 50, batch 2048, CE over all items, 2 layers,
2 heads, d 64, dropout 0.5: RecBole SASRec's defaults, the same for every model that has these keys
(RecBole's Caser or GRU4Rec keep their own sizes). Each model runs in
a fresh subprocess (``--one-process``: all in this one) on the same pre-fetched training batches,
through our config resolver, with its registered defaults (our presets: the paper's settings, e.g.
EulerFormer with phase-contrastive learning, Denoiser with its mask gradient, L0 and Jacobian terms,
FEARecExt with CReg and FReg), which ``--set`` overrides for our models.
RecBole's ``FEARec`` gets the paper's keys (``benchmarks/epoch.py`` ``PAPER_KEYS``), since its own
defaults switch the paper's losses off. RecBole's models run in our process setup (anomaly mode off,
allocator tuned): this table compares models; ``benchmarks/train_step.py`` compares against RecBole
as a user gets it.

Printed per model and precision: median seconds per step (forward, backward, Adam; CUDA
synchronised), its ratio to our ``SeqTransformer`` (SASRec-equivalent) and to RecBole's
``SASRec`` and ``FEARec`` in the same run, and CUDA peak memory. Every round runs every model, in
reverse order every other round; times are medians over rounds and ratios medians of per-round ratios.
``--compile`` wraps ``calculate_loss`` in ``torch.compile`` with ``train_step.py``'s
``--compile-*`` options (see docs/performance.md for when it helps). ``--quick``: smoke run (tiny sizes, 1 round, 1 step); its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from train_step import add_compile_arguments, compile_forwarded, compile_loss  # noqa: E402  (needs the path)

DEFAULT_MODELS = ("SASRec", "FEARec", "SeqTransformer", "EulerFormer", "FEARecExt", "DuoRecExt", "LinRec", "Denoiser",
                  "TiSASRec", "SASRecCAPE", "SASRecCoPE", "FMLPRec", "CL4SRec", "CoSeRec", "SSEPT")
SIZES = {"n_layers": 2, "n_heads": 2, "hidden_size": 64, "inner_size": 256, "hidden_dropout_prob": 0.5,
         "attn_dropout_prob": 0.5}
BASELINES = ("SeqTransformer", "SASRec", "FEARec")


class PreparedModel:
    """One model's config, initial weights and pre-fetched training batches (kept on the CPU), built once
    per process: every timed cell trains a fresh copy with a fresh optimizer."""

    def __init__(self, model_name: str, args):
        import torch

        import recbole_ext  # noqa: F401  (compat)
        from epoch import PAPER_KEYS
        from recbole_ext.config import resolve
        from recbole_ext.config.resolve import accepted_keys
        from recbole_ext.registry import plugin_models
        from recbole_ext.runner import build, recbole_config

        if args.threads:
            torch.set_num_threads(args.threads)
        # the transformer sizes go to the models that have them (not, e.g., RecBole's Caser or GRU4Rec)
        sizes = {key: value for key, value in SIZES.items() if key in accepted_keys(model_name, "ml-100k")}
        values = {"model": model_name, "dataset": "ml-100k", "train_batch_size": args.batch,
                  "MAX_ITEM_LIST_LENGTH": args.length, "loss_type": "CE", "use_gpu": args.device == "cuda",
                  "show_progress": False, "state": "ERROR", **sizes, **(PAPER_KEYS if model_name == "FEARec" else {})}
        ours = plugin_models().get(model_name) is not None
        resolved = resolve(ROOT / "configs" / "base" / "ml100k.yaml", args.set if ours else [], values)
        self.config = recbole_config(resolved, checkpoint_dir=Path(args.scratch) / model_name)
        model, _, (train_data, _, _) = build(self.config)
        self.initial_model = model.cpu()  # each cell trains a copy: same initial weights for every cell
        self.trims_padding = bool(getattr(model, "trims_padding", False))
        wanted = args.warmup + args.steps
        self.batches = []
        for interaction in train_data:
            self.batches.append(interaction)
            if len(self.batches) == wanted:
                break
        # a model trained on one window per user has a single batch of 2048 on ml-100k (943 users): repeat
        self.batches = [self.batches[index % len(self.batches)] for index in range(wanted)]


def time_cell(prepared: PreparedModel, model_name: str, precision: str, args) -> dict:
    """Median seconds of a training step (forward, backward, Adam; CUDA synchronised) after the
    warm-up steps, and the CUDA memory peak above what was allocated before the cell began."""
    import copy

    import torch

    device = torch.device(prepared.config["device"])
    model = copy.deepcopy(prepared.initial_model).to(device)
    batches = [interaction.to(device) for interaction in prepared.batches]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_function = compile_loss(model, args) if args.compile else model.calculate_loss
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    times = []
    if device.type == "cuda":
        synchronize()
        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated() - sum(
            value.numel() * value.element_size() for batch in batches for value in batch.interaction.values())
    for index, interaction in enumerate(batches):
        synchronize()
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_function(interaction)
            loss = sum(loss) if isinstance(loss, tuple) else loss
        loss.backward()
        optimizer.step()
        synchronize()
        if index >= args.warmup:
            times.append(time.perf_counter() - started)
    peak = (torch.cuda.max_memory_allocated() - resident) / 2**20 if device.type == "cuda" else None
    return {"model": model_name, "precision": precision, "median_s_per_step": statistics.median(times),
            "peak_memory_mb": peak,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(), "trims_padding": prepared.trims_padding}


def worker(model_name: str, precision: str, args) -> dict:
    return time_cell(PreparedModel(model_name, args), model_name, precision, args)


class InProcessCells:
    """``--one-process``: every cell in this process, each model's data built once. On a lent GPU a
    subprocess per cell (interpreter, RecBole's dataset build, CUDA context) would spend much of a
    short lease on start-up, and a GPU step does not feel the CPU-memory effects the subprocesses
    isolate on 2 vCPUs. A cell that raises is a row with its error, as a failed worker is."""

    def __init__(self, args):
        self.args, self.prepared = args, {}

    def __call__(self, model_name: str, precision: str) -> dict:
        import gc
        import traceback

        import torch

        try:
            if model_name not in self.prepared:
                self.prepared[model_name] = PreparedModel(model_name, self.args)
            return time_cell(self.prepared[model_name], model_name, precision, self.args)
        except Exception:  # noqa: BLE001  (any failure is the row's content)
            return failed_cell(model_name, precision, traceback.format_exc())
        finally:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def hardware(cell: dict, device: str) -> str:
    import torch

    processor = platform.processor() or platform.machine()
    try:
        processor = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f"{cell['device']}, " if device == "cuda" else ""
    return f"{gpu}{processor} ({os.cpu_count()} logical cores, {cell['threads']} torch threads), torch {torch.__version__}"


def failed_cell(model_name: str, precision: str, stderr: str) -> dict:
    """A worker that crashed is a row of the table, not the end of the run: on a lent GPU, RecBole's FEARec
    under bf16 autocast stops in ``torch.fft.rfft`` ("Unsupported dtype BFloat16"), and the other
    twenty-odd cells are still worth their device time. The row keeps the error's last line."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    print(f"{model_name} ({precision}) failed:\n{stderr[-3000:]}", file=sys.stderr)
    return {"model": model_name, "precision": precision, "error": lines[-1] if lines else "no output"}


def median_time(rounds: list[dict], key: str) -> float | None:
    times = [r[key]["median_s_per_step"] for r in rounds if "error" not in r[key]]
    return statistics.median(times) if times else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--precision", default="fp32,bf16", help="fp32, bf16 or both")
    parser.add_argument("--compile", action="store_true", help="torch.compile(calculate_loss), with the --compile-* options")
    add_compile_arguments(parser, probes=False)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for this project's models (repeatable, as `recbole-ext run --set`; "
                             "RecBole's own models keep their defaults), e.g. pack_tokens=false")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every model R times, the order reversed every other round; report medians")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds to wait after each worker exits (a big one, e.g. RecBole's FEARec, leaves "
                             "the kernel reclaiming its memory, which slowed the next worker on 2 vCPUs)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 64, length 20, 1 round, 1 step")
    parser.add_argument("--one-process", action="store_true",
                        help="run every cell in this process, each model's data built once (for a short GPU lease; "
                             "default: one subprocess per cell)")
    parser.add_argument("--json", default=None, help="results file (default: benchmarks/results/model_steps_<device>.json)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.batch, args.length, args.rounds, args.steps, args.warmup, args.settle = 64, 20, 1, 1, 1, 0.0

    if args.worker:
        model_name, _, precision = args.worker.partition(":")
        print(json.dumps(worker(model_name, precision, args)))
        return

    models, precisions = args.models.split(","), args.precision.split(",")
    cells = [(m, p) for p in precisions for m in models]
    rounds: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory() as scratch:
        args.scratch = scratch
        in_process = InProcessCells(args) if args.one_process else None
        for index in range(args.rounds):
            results = {}
            for model_name, precision in (cells if index % 2 == 0 else cells[::-1]):
                if in_process is not None:
                    results[f"{model_name}:{precision}"] = in_process(model_name, precision)
                    continue
                command = [sys.executable, __file__, "--worker", f"{model_name}:{precision}", "--scratch", scratch,
                           "--device", args.device, "--batch", str(args.batch), "--length", str(args.length),
                           "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
                           *(["--compile", *compile_forwarded(args)] if args.compile else []),
                           *(f"--set={override}" for override in args.set)]
                done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
                results[f"{model_name}:{precision}"] = (json.loads(done.stdout.strip().splitlines()[-1])
                                                        if done.returncode == 0
                                                        else failed_cell(model_name, precision, done.stderr))
                time.sleep(args.settle)
            rounds.append({key: results[key] for key in (f"{m}:{p}" for m, p in cells)})

    first = next((cell for cell in rounds[0].values() if "error" not in cell), {"device": "?", "threads": "?"})
    print(f"device: {first['device']} ({args.device}), torch threads {first['threads']}; ml-100k, batch {args.batch}, "
          f"length {args.length}; {args.rounds} rounds x {args.steps} steps after {args.warmup} warm-up; "
          f"{time.strftime('%Y-%m-%d')}{f'; compiled ({args.compile_mode})' if args.compile else ''}"
          f"{'; our models with ' + ', '.join(args.set) if args.set else ''}"
          f"{'; QUICK MODE (smoke only, numbers mean nothing)' if args.quick else ''}")
    header = f"{'model':<15} {'prec':<5} {'s/step':>8} " + " ".join(f"{'vs ' + b:>17}" for b in BASELINES) + f" {'peak MB':>8}"
    print(header)
    summary = []
    for model_name, precision in cells:
        key = f"{model_name}:{precision}"
        seconds = median_time(rounds, key)
        if seconds is None:
            error = rounds[-1][key]["error"]
            summary.append({"model": model_name, "precision": precision, "median_s_per_step": None, "error": error})
            print(f"{model_name:<15} {precision:<5} {'failed':>8} {error[:120]}")
            continue
        ratios = {}
        for baseline in BASELINES:
            base = f"{baseline}:{precision}"
            # per-round ratio (same round = same machine state), median over the rounds where both ran
            per_round = [r[key]["median_s_per_step"] / r[base]["median_s_per_step"] for r in rounds
                         if base in r and "error" not in r[key] and "error" not in r[base]]
            if per_round:
                ratios[baseline] = statistics.median(per_round)
        last = next(r[key] for r in reversed(rounds) if "error" not in r[key])
        peak = last["peak_memory_mb"]
        summary.append({"model": model_name, "precision": precision, "median_s_per_step": seconds,
                        "time_over": ratios, "peak_memory_mb": peak, "trims_padding": last["trims_padding"]})
        print(f"{model_name:<15} {precision:<5} {seconds:>8.3f} "
              + " ".join(f"{(f'{ratios[b]:.2f}x' if b in ratios else '-'):>17}" for b in BASELINES)
              + f" {('-' if peak is None else f'{peak:.0f}'):>8}")
    print("(ratios are time over the baseline's time: < 1 is faster)")
    target = results_target(args.json, args.quick, ROOT / "benchmarks" / "results" / f"model_steps_{args.device}.json")
    if target:
        write_results(target, {"argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d"),
                               "hardware": hardware(first, args.device), "summary": summary, "rounds": rounds})


if __name__ == "__main__":
    main()
