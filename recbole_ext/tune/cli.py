"""``recbole-ext tune``: argument parsing and printing; the work is in :mod:`recbole_ext.tune.driver`."""
from __future__ import annotations


def add_tune_command(commands) -> None:
    tune = commands.add_parser("tune", help="sweep hyperparameters with Ray Tune (local, or a Ray cluster)",
                               description="Run a sweep file's trials with Ray Tune; see docs/tune.md.")
    tune.add_argument("--config", required=True, help="base config (YAML; a bare name is looked up in configs/)")
    tune.add_argument("--sweep", required=True, help="sweep file (a bare name is also looked up in configs/sweeps/)")
    tune.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a key of every trial, as for `run`; repeatable")
    tune.add_argument("--address", help="join this Ray cluster (default: $RAY_ADDRESS, else start a local Ray)")
    tune.add_argument("--resume", action="store_true", help="continue an interrupted sweep; finished trials are kept")
    tune.add_argument("--max-concurrent", type=int, metavar="N", help="trials at once (default: as resources allow)")
    tune.add_argument("--cpus-per-trial", type=float, metavar="C", help="CPUs per trial = its torch threads (default 1)")
    tune.add_argument("--gpus-per-trial", type=float, metavar="G", help="GPUs per trial, may be fractional (default 0)")
    tune.add_argument("--output-dir", default="tune_runs", help="parent of the sweep directory (default: ./tune_runs)")
    tune.add_argument("--name", help="sweep directory name (default: the sweep's `name`, else its file name)")
    tune.add_argument("--ship-code", action="store_true",
                      help="send this recbole_ext package to the cluster's workers (Ray runtime_env py_modules)")
    tune.set_defaults(handler=command_tune)


def command_tune(args) -> int:
    from recbole_ext.tune.driver import run_sweep

    outcome = run_sweep(args.config, args.sweep, args.overrides, address=args.address, resume=args.resume,
                        max_concurrent=args.max_concurrent, cpus_per_trial=args.cpus_per_trial,
                        gpus_per_trial=args.gpus_per_trial, output_dir=args.output_dir, name=args.name,
                        ship_code=args.ship_code)
    counts = {}
    for row in outcome.rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    print(f"sweep directory: {outcome.sweep_dir}  ({', '.join(f'{n} {s}' for s, n in counts.items())})")
    if outcome.best is not None:
        print(f"best: {outcome.best.trial_id} valid score {outcome.best.score:.4f}  {outcome.best.params}")
    for kind, path in outcome.files.items():
        print(f"{kind}: {path}")
    return 1 if counts.get("error") else 0
