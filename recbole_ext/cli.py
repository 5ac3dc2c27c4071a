"""The ``recbole-ext`` command: ``run``, ``evaluate``, ``list``, ``data``, ``reproduce``, ``tune``.

Errors in the user's input (config, names, data, checkpoints) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recbole-ext", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="store_true", help="print versions and exit")
    commands = parser.add_subparsers(dest="command")

    run = commands.add_parser("run", help="train and evaluate one config")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="YAML file; a bare name is also looked up in configs/")
    source.add_argument("--resume", metavar="RUN_DIR",
                        help="continue a killed run (or train a finished one further) from RUN_DIR/resume.pth "
                             "under its own config.yaml; --set may change only epochs, stopping_step and how it runs")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a key (YAML value; a.b=1 sets a nested option); repeatable")

    evaluate = commands.add_parser("evaluate", help="re-evaluate a saved checkpoint on its own data")
    evaluate.add_argument("--checkpoint", required=True, help="model.pth of a run directory")

    listing = commands.add_parser("list", help="list models (and parts) and where they come from")
    listing.add_argument("--parts", action="store_true", help="also list backbones, attention, position and aux-loss parts")

    from recbole_ext.data.cli import add_data_parser  # light: no pandas/torch at parse time

    add_data_parser(commands)
    from recbole_ext.repro.cli import add_reproduce_command  # light: argparse only

    add_reproduce_command(commands)
    from recbole_ext.tune import add_tune_command  # light: Ray is imported when a sweep starts

    add_tune_command(commands)
    return parser


def print_metrics(title: str, result: dict[str, float]) -> None:
    print(f"{title}: " + "  ".join(f"{k}={v:.4f}" for k, v in result.items()))


def command_run(args) -> int:
    from recbole_ext.runner import resume_run, run

    result = resume_run(args.resume, args.overrides) if args.resume else run(args.config, args.overrides)
    print(f"run directory: {result.run_dir}")
    print_metrics(f"best valid (epoch {result.best_epoch})", result.best_valid_result)
    print_metrics("test", result.test_result)
    return 0


def command_evaluate(args) -> int:
    from recbole_ext.runner import evaluate_checkpoint

    results = evaluate_checkpoint(args.checkpoint)
    print_metrics("valid", results["valid"])
    print_metrics("test", results["test"])
    return 0


def command_list(args) -> int:
    from recbole_ext.registry import all_models, shadowed_names

    models = all_models()
    width = max(map(len, models))
    for name in sorted(models, key=lambda n: (models[n].source == "recbole", n.lower())):
        print(f"{name:<{width}}  {models[name].source}")
    for name in shadowed_names():
        print(f"warning: plugin model {name!r} has the name of a RecBole model", file=sys.stderr)
    if args.parts:
        from recbole_ext.models import BACKBONE
        from recbole_ext.nn import ATTENTION, AUX_LOSS, POSITION

        for registry in (BACKBONE, ATTENTION, POSITION, AUX_LOSS):
            print(f"\n[{registry.slot}] " + ", ".join(registry.names()) if registry.names() else f"\n[{registry.slot}] (none)")
    return 0


def command_data(args) -> int:
    from recbole_ext.data.cli import command_data as handler

    return handler(args)


def main(argv: list[str] | None = None) -> int:
    try:  # first: the parser imports the package, which checks the RecBole version
        import recbole_ext  # noqa: F401
        from recbole_ext.errors import RecboleExtError
    except ImportError as error:  # wrong or missing RecBole: one line
        print(f"recbole-ext: error: {error}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.version:
        from recbole_ext.compat import versions

        print(" ".join(f"{k}={v}" for k, v in versions().items()))
        return 0
    handlers = {"run": command_run, "evaluate": command_evaluate, "list": command_list, "data": command_data}
    if args.command is None:
        build_parser().print_help()
        return 2
    try:
        return (getattr(args, "handler", None) or handlers[args.command])(args)
    except RecboleExtError as error:
        print(f"recbole-ext: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("recbole-ext: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
