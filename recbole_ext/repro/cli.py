"""``recbole-ext reproduce``: argument parsing and printing; the work is in plan/execute/results/report."""
from __future__ import annotations

import shlex
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from recbole_ext.errors import ConfigError

DEFAULT_OUT = "runs/reproduce"


def add_reproduce_command(commands) -> None:
    parser = commands.add_parser(
        "reproduce", help="rebuild a paper table from atomic files, beside the published numbers",
        description="Run every cell of a published table that the data here allows (cached by config hash: "
                    "a rerun or a resumed run trains only missing cells) and write <table>.md, .csv and .png.")
    parser.add_argument("table", nargs="?", help="table name (see --list) or a table YAML file")
    parser.add_argument("--list", action="store_true",
                        help="list the tables (with TABLE: every cell) and which cells are runnable here")
    # "extend", not the default "store": a repeated --models must add rows, not silently drop the earlier ones.
    parser.add_argument("--datasets", nargs="+", action="extend", metavar="NAME",
                        help="only these dataset columns (label or preset); repeatable")
    parser.add_argument("--models", nargs="+", action="extend", metavar="ROW",
                        help="only these rows (row id or label); repeatable")
    parser.add_argument("--seeds", type=int, default=1, help="runs per cell, seeds from the table's seed upward")
    parser.add_argument("--budget", choices=("paper", "quick"), default="paper",
                        help="paper: the paper's epochs and early stopping; quick: a smoke test (not a reproduction)")
    parser.add_argument("--use-data", action="append", default=[], metavar="COLUMN[:ROW]=CONFIG",
                        help="run a column on another dataset config (e.g. ML-1M=base/ml100k.yaml), or one row "
                             "of it (ML-1M:fdsa=base/ml100k_items.yaml, for rows that read item features); "
                             "repeatable; labelled as substituted data in every output")
    parser.add_argument("--parallel", type=int, default=0, metavar="N", help="run N cells at once through local Ray")
    parser.add_argument("--address", help="run cells on this Ray cluster (ray://host:port or auto)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"where <table>.md/.csv/.png and records/ (one small "
                                                           f"file per finished run) go (default: {DEFAULT_OUT})")
    parser.add_argument("--cache", help="run cache: one run directory per config hash (default: OUT/runs)")
    parser.add_argument("--records-from", action="append", default=[], metavar="DIR",
                        help="also count the runs recorded in DIR (another --out folder or its records/, e.g. "
                             "docs/results/ml100k on a fresh machine) as finished: their records that OUT/records "
                             "lacks are copied into it first (--dry-run and --list only read them); repeatable")
    parser.add_argument("--bf16", action="store_true",
                        help="train the runs it starts under bf16 autocast (evaluation stays fp32): steps 1.8x "
                             "faster on CPUs with AMX (docs/performance.md: metrics within seed noise), refused on CPUs "
                             "without AVX-512, where bf16 is many times slower; runs finished at either precision "
                             "fill the other's cells, labelled")
    parser.add_argument("--index", action="store_true",
                        help="only rewrite OUT/README.md, every table under --out on one page, ours beside "
                             "published (reproduce also rewrites it after each table it writes)")
    parser.add_argument("--dry-run", action="store_true", help="plan and print, train nothing")
    parser.add_argument("--report-only", action="store_true",
                        help="write the outputs from the runs already finished in the cache, train nothing "
                             "(the other cells say 'not run')")
    parser.set_defaults(handler=command_reproduce)


def _use_data(entries: list[str]) -> dict[str, str]:
    """``--use-data`` entries as ``plan.plan_table`` takes them: ``COLUMN`` or ``COLUMN:ROW`` → config."""
    mapping = {}
    for entry in entries:
        target, sep, config = entry.partition("=")
        column, _, row = target.partition(":")
        if not sep or not column or not config or (":" in target and not row):
            raise ConfigError(f"--use-data {entry!r}: expected COLUMN=CONFIG or COLUMN:ROW=CONFIG, "
                              f"e.g. ML-1M=base/ml100k.yaml")
        if target in mapping and mapping[target] != config:
            raise ConfigError(f"--use-data {target}: given twice ({mapping[target]} and {config})")
        mapping[target] = config
    return mapping


def _state_counts(cells) -> str:
    counts = defaultdict(int)
    for cell in cells:
        counts[cell.state] += 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def recorded_settings(records: Path) -> dict:
    """What the records in ``records`` tell the plan: the devices they trained on and the atomic
    files they trained on (``plan.plan_table``'s ``other_devices`` and ``recorded_data``)."""
    from recbole_ext.repro.records import recorded_data, recorded_devices

    return {"other_devices": recorded_devices(records), "recorded_data": recorded_data(records)}


def print_skips(cells, stream=None) -> None:
    """One line per reason (cells of one dataset missing the same files share a line)."""
    by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cell in cells:
        if cell.state not in ("pending", "missing-data", "error", "records-only"):
            continue
        # a records-only cell without runs is a statistics cell: its records hold counts, not runs
        state = "records-only-counts" if cell.state == "records-only" and not cell.runs else cell.state
        # both reasons are about a dataset's files not being here, so the line names the dataset
        labelled = cell.state in ("missing-data", "records-only")
        reason = f"{cell.column.label}: {cell.reason}" if labelled else cell.reason
        by_reason[(state, reason)].append(f"{cell.column.label}/{cell.row.label}")
    records_only = {"records-only": "the recorded runs are reported, none trained here",
                    "records-only-counts": "the recorded counts are reported"}
    for (state, reason), where in by_reason.items():
        cells_text = where[0] if len(where) == 1 else f"{len(where)} cells"
        if state in records_only:
            print(f"records only ({cells_text}; {records_only[state]}): {reason}", file=stream or sys.stdout)
        else:
            print(f"skip ({state}, {cells_text}): {reason}", file=stream or sys.stdout)


def cache_dir(args) -> Path:
    return Path(args.cache) if args.cache else Path(args.out) / "runs"


@contextmanager
def gathered_records(args, writes: bool = True):
    """OUT/records with the records of each ``--records-from`` folder it lacks. The run cache does
    not survive a machine, so without this a fresh one must copy the committed records into OUT
    by hand before training a row's next seed, or it trains the recorded seeds again. Copied, not
    read in place, so OUT's tables name only records OUT holds; a command that writes nothing
    (``--dry-run``, ``--list``) reads a temporary merged copy and leaves OUT as it was."""
    from recbole_ext.repro.records import merge_records, records_dir, records_source

    records = records_dir(args.out)
    sources = [records_source(folder) for folder in args.records_from]
    if not sources:
        yield records
        return
    if writes:
        for source in sources:
            copied, kept = merge_records(source, records)
            differing = f"; {kept} differing from OUT's kept as they were" if kept else ""
            print(f"records: {copied} copied from {source} into {records}{differing}")
        yield records
        return
    with tempfile.TemporaryDirectory() as scratch:
        merged = Path(scratch) / "records"
        for source in [records, *sources]:
            merge_records(source, merged)
        yield merged


def command_text(args) -> str:
    """The command line that wrote this report (for its header)."""
    parts = ["recbole-ext", "reproduce", args.table]
    for option in ("datasets", "models"):
        if getattr(args, option):
            parts += [f"--{option}", *getattr(args, option)]
    parts += ["--seeds", str(args.seeds), "--budget", args.budget]
    for entry in args.use_data:
        parts += ["--use-data", entry]
    if args.parallel:
        parts += ["--parallel", str(args.parallel)]
    if args.address:
        parts += ["--address", args.address]
    if getattr(args, "bf16", False):
        parts += ["--bf16"]
    if args.out != DEFAULT_OUT:
        parts += ["--out", args.out]
    if args.cache:
        parts += ["--cache", args.cache]
    for folder in getattr(args, "records_from", []):
        parts += ["--records-from", folder]
    if getattr(args, "report_only", False):
        parts += ["--report-only"]
    return " ".join(shlex.quote(p) for p in parts)


def command_list(args) -> int:
    with gathered_records(args, writes=False) as records:
        return _list_tables(args, records)


def _list_tables(args, records: Path) -> int:
    """Every table (or every cell of one), with its state here and, for runnable cells, how many of
    their ``--seeds`` runs are finished in the cache or recorded under ``--out``, and how far each
    half-trained one got."""
    from recbole_ext.devices import device_label
    from recbole_ext.repro.consistency import published_inconsistencies
    from recbole_ext.repro.execute import finished_runs, half_trained
    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.report import INCONSISTENT_MARK
    from recbole_ext.repro.tables import all_tables, load_table

    runs_dir = cache_dir(args)
    devices = {"device": device_label(), **recorded_settings(records), "bf16": args.bf16}
    if args.table:
        table = load_table(args.table)
        cells = plan_table(table, runs_dir, args.datasets, args.models, args.seeds, args.budget,
                           _use_data(args.use_data), **devices)
        print(f"{table.name}: {table.paper} {table.title} ({table.source})")
        conflicts = published_inconsistencies(table)
        for cell in cells:
            reason = f": {cell.reason}" if cell.reason else ""
            done = f" ({finished_runs(cell, records)}/{len(cell.runs)} runs finished)" if cell.runs else ""
            partial, other_setting = half_trained(cell, records)
            if partial:
                done = f"{done[:-1]}; unfinished, a rerun resumes it: {'; '.join(partial)})"
            if other_setting:
                done = (f"{done[:-1]}; unfinished under another setting, which a rerun with that setting resumes: "
                        f"{'; '.join(other_setting)})")
            conflict = conflicts.get((cell.row.id, cell.column.label))
            flagged = f"; {INCONSISTENT_MARK} published: {conflict.describe()}" if conflict else ""
            print(f"  {cell.column.label:<14} {cell.row.label:<28} {cell.state}{done}{reason}{flagged}")
        return 0
    memo: dict = {}  # each dataset's files are checked once for all tables
    for table in all_tables():
        cells = plan_table(table, runs_dir, budget=args.budget, memo=memo, **devices)
        finished = sum(finished_runs(cell, records) for cell in cells)
        print(f"{table.name:<16} {table.paper} {table.title} — {len(cells)} cells: {_state_counts(cells)}"
              f"{f'; {finished} runs finished' if finished else ''}")
    return 0


def refuse_bf16_without_kernels(args, device: str, cells, records) -> None:
    """``--bf16`` trains many times slower than fp32 on a CPU without oneDNN's bf16 kernels
    (``devices.cpu_lacks_bf16_kernels``): a paper-budget cell would take days instead of hours, so
    this stops before training rather than warning in a log. Runs on a Ray cluster use its CPUs."""
    from recbole_ext import devices
    from recbole_ext.repro.execute import pending_runs

    if not (args.bf16 and device == "cpu" and not args.address and devices.cpu_lacks_bf16_kernels()):
        return
    todo, _ = pending_runs(cells, records)
    todo = [spec for spec in todo if spec.values.get("bf16")]  # not the CPU_FP32_MODELS rows, which stay fp32
    if todo:
        raise ConfigError(f"--bf16: this CPU has no bf16 matrix kernels (oneDNN needs AVX-512), so bf16 autocast "
                          f"would make the {len(todo)} run(s) to train many times slower than fp32 "
                          f"(docs/performance.md); run without --bf16")


def command_reproduce(args) -> int:
    from recbole_ext.repro.index import write_index
    from recbole_ext.repro.tables import load_table

    if args.list:
        return command_list(args)
    if args.index:
        if args.records_from:  # the index reads the table CSVs alone: the option would do nothing
            raise ConfigError("--records-from does nothing with --index, which reads only the table CSVs under "
                              "--out: rebuild a table with it (--report-only) instead")
        path = write_index(Path(args.out))
        print(f"wrote {path}" if path else f"{args.out}: no table CSV to index")
        return 0
    if not args.table:
        raise ConfigError("reproduce: name a table (recbole-ext reproduce --list shows them)")
    if args.parallel < 0:
        raise ConfigError(f"--parallel must be >= 0, got {args.parallel}")
    started = time.time()
    table = load_table(args.table)
    with gathered_records(args, writes=not args.dry_run) as records:
        return _reproduce_table(args, table, records, started)


def _reproduce_table(args, table, records: Path, started: float) -> int:
    from recbole_ext.devices import CPU_FP32_MODELS, device_label, hardware_label
    from recbole_ext.repro.execute import (Progress, execute_cells, pending_runs, record_finished_runs, run_dir_of,
                                           run_progress)
    from recbole_ext.repro.index import refresh_indexes
    from recbole_ext.repro.plan import QUICK_LABEL, plan_table
    from recbole_ext.repro.report import RunInfo, write_reports
    from recbole_ext.repro.results import collect

    out = Path(args.out)
    device = device_label()
    cells = plan_table(table, cache_dir(args), args.datasets, args.models, args.seeds, args.budget,
                       _use_data(args.use_data), device, bf16=args.bf16, **recorded_settings(records))
    if args.budget == "quick":
        print(f"note: {QUICK_LABEL}")
    fp32_rows = args.bf16 and sorted({cell.row.label for cell in cells if cell.runs and not cell.runs[0].values.get("bf16")})
    if fp32_rows:
        print(f"note: --bf16 does not apply to the {', '.join(fp32_rows)} row(s) here, which train in fp32: bf16 "
              f"autocast slows {', '.join(sorted(CPU_FP32_MODELS))} down on a CPU (docs/performance.md)")
    print(f"{table.name}: {len(cells)} cells: {_state_counts(cells)}")
    print_skips(cells)
    if args.dry_run:
        todo, cached = pending_runs(cells, records)
        print(f"{cached} run(s) cached, {len(todo)} to run (--dry-run: nothing trained)")
        for spec in todo:
            progress = run_progress(run_dir_of(spec))
            print(f"  would run {spec.describe()}{f', resuming {progress}' if progress else ''}")
        return 0
    if args.report_only:
        todo, cached = pending_runs(cells, records)
        progress = Progress(total=len(todo) + cached, cached=cached)
        print(f"{cached} run(s) cached; {len(todo)} not run (--report-only)")
    else:
        refuse_bf16_without_kernels(args, device, cells, records)
        progress = execute_cells(cells, records, args.parallel, args.address)
    record_finished_runs(cells, records)
    collected = collect(table, cells, records)
    info = RunInfo(command=command_text(args), budget=args.budget, seeds=args.seeds, bf16=args.bf16,
                   hardware=hardware_label(),
                   date=time.strftime("%Y-%m-%d %H:%M"),
                   wall_time_s=time.time() - started, ran=progress.ran, cached=progress.cached, failed=progress.failed,
                   trained_on=collected.trained_on, trained_at=collected.trained_at)
    skipped: list[str] = []
    for path in [*write_reports(table, collected.lines, info, out), *refresh_indexes(out, skipped)]:
        print(f"wrote {path}")  # no index when the folder holds only quick-budget tables
    for message in skipped:
        print(message)
    return 1 if progress.failed else 0
