"""The sweep driver: check the sweep, start or join Ray, run or restore the Tuner, write the report.

Layout of a sweep directory (``<output_dir>/<name>/``, Ray's experiment directory):
``tune_plan.json`` (what was asked, checked on ``--resume``), ``runs/<trial_id>/`` (each trial's
run directory: config, history, metrics, checkpoint), ``<trial_id>/`` (Ray's per-trial results),
``results.csv``, ``results.md``, ``best.yaml``, ``metric_vs_params.png``.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from recbole_ext.config import find_config_file
from recbole_ext.errors import ConfigError, RecboleExtError
from recbole_ext.tune.report import TrialRow, plot_metric, rows_from_results, write_best_config, write_csv, write_markdown
from recbole_ext.tune.sweep import Sweep, check_sweep, max_epochs, parse_sweep, set_arg
from recbole_ext.tune.trial import RUNS_DIRNAME, TrialPlan, run_trial, trial_dirname

PLAN_FILE = "tune_plan.json"


class RayMissingError(RecboleExtError):
    """Ray Tune is an optional extra."""


def require_ray() -> None:
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.tune") is None:
        raise RayMissingError("Ray Tune is not installed: pip install recbole-ext[tune]")


@dataclass
class SweepOutcome:
    sweep_dir: Path
    rows: list[TrialRow]
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def best(self) -> TrialRow | None:
        """The best finished trial: a stopped one would score differently when rerun to the end."""
        return next((row for row in self.rows if row.status == "finished"), None)


def _start_ray(address: str | None, ship_code: bool) -> None:
    import ray

    runtime_env = {"py_modules": [str(Path(__file__).resolve().parents[1])]} if ship_code else None
    common = {"logging_level": logging.WARNING, "log_to_driver": False, "runtime_env": runtime_env}
    if address:
        ray.init(address=address, **common)
    else:
        # "local": a new Ray even where `ray start` left one running (address=None would join that one)
        ray.init(address="local", num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False, **common)


def _scheduler(sweep: Sweep, horizon: int):
    if sweep.scheduler.type == "none":
        return None
    from ray.tune.schedulers import ASHAScheduler

    options = sweep.scheduler.options
    # +1: the last epoch's report must not reach max_t, or ASHA stops the trial before its test report.
    return ASHAScheduler(time_attr="epoch", max_t=(options["max_t"] or horizon) + 1,
                         grace_period=options["grace_period"], reduction_factor=options["reduction_factor"])


def run_sweep(config: str | os.PathLike, sweep_file: str | os.PathLike, overrides: list[str] = (), *,
              address: str | None = None, resume: bool = False, max_concurrent: int | None = None,
              cpus_per_trial: float | None = None, gpus_per_trial: float | None = None,
              output_dir: str | os.PathLike = "tune_runs", name: str | None = None,
              ship_code: bool = False) -> SweepOutcome:
    """Run (or, with ``resume``, continue) a sweep and write its report; see the module docstring."""
    require_ray()
    sweep = parse_sweep(sweep_file)
    sweep.name = name or sweep.name
    config_file = find_config_file(config).resolve()
    overrides = list(overrides)
    base = check_sweep(sweep, config_file, overrides)
    from recbole_ext.data import require_atomic_files

    require_atomic_files(base)
    sweep_dir = Path(output_dir).resolve() / sweep.name
    plan = TrialPlan(
        config_file=str(config_file),
        # data_path as the driver sees it: a worker's working directory is elsewhere
        overrides=(*sweep.fixed_overrides(), *overrides,
                   *([set_arg("data_path", os.path.abspath(base.values["data_path"]))] if base.values.get("data_path") else [])),
        space_keys=tuple(d.key for d in sweep.space), metric=sweep.metric, mode=sweep.mode,
        runs_dir=str(sweep_dir / RUNS_DIRNAME))
    asked = {"config": str(config_file), "overrides": overrides, "sweep": sweep.as_dict()}
    _check_plan(sweep_dir, asked, resume)

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    _start_ray(address or os.environ.get("RAY_ADDRESS"), ship_code)
    try:
        results = _fit(sweep, plan, sweep_dir, base.values, resume, max_concurrent, cpus_per_trial, gpus_per_trial)
    finally:
        import ray

        ray.shutdown()
    rows = rows_from_results(results, sweep)
    return _write_report(SweepOutcome(sweep_dir, rows), sweep, config_file, overrides)


def _check_plan(sweep_dir: Path, asked: dict, resume: bool) -> None:
    from ray.tune import Tuner

    plan_file = sweep_dir / PLAN_FILE
    restorable = sweep_dir.is_dir() and Tuner.can_restore(sweep_dir)
    if resume:
        if not restorable:
            raise ConfigError(f"{sweep_dir}: no interrupted sweep to resume (run without --resume to start it)")
        before = json.loads(plan_file.read_text()) if plan_file.is_file() else None
        if before != asked:
            changed = [k for k in asked if before is None or before.get(k) != asked[k]]
            raise ConfigError(f"{plan_file}: the sweep was started with other {', '.join(changed)}; "
                              "resume with the same --config, --sweep and --set")
        return
    if restorable:
        raise ConfigError(f"{sweep_dir}: a sweep with this name exists; pass --resume to continue it, "
                          "or --name NEW (or delete the directory) to start again")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / PLAN_FILE).write_text(json.dumps(asked, indent=2) + "\n")


def _fit(sweep: Sweep, plan: TrialPlan, sweep_dir: Path, base_values: dict, resume: bool,
         max_concurrent, cpus_per_trial, gpus_per_trial):
    from ray import tune

    from recbole_ext.tune.progress import ProgressLines

    cpus = cpus_per_trial or sweep.cpus_per_trial or 1
    gpus = gpus_per_trial if gpus_per_trial is not None else (sweep.gpus_per_trial or 0)
    trainable = tune.with_resources(tune.with_parameters(run_trial, plan=plan), {"cpu": cpus, "gpu": gpus})
    if resume:
        tuner = tune.Tuner.restore(str(sweep_dir), trainable, resume_unfinished=True, restart_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={d.key: d.ray_domain() for d in sweep.space},
            tune_config=tune.TuneConfig(
                metric=f"valid/{sweep.metric_key}", mode=sweep.mode, num_samples=sweep.num_samples,
                scheduler=_scheduler(sweep, max_epochs(sweep, base_values)),
                max_concurrent_trials=max_concurrent or sweep.max_concurrent or None,
                trial_dirname_creator=trial_dirname,
                reuse_actors=True),  # a new worker process would import torch and RecBole again
            run_config=tune.RunConfig(
                name=sweep_dir.name, storage_path=str(sweep_dir.parent), verbose=0,
                callbacks=[ProgressLines(sweep.metric_key, sweep.trial_count())]),
        )
    return tuner.fit()


def _write_report(outcome: SweepOutcome, sweep: Sweep, config_file: Path, overrides: list[str]) -> SweepOutcome:
    directory = outcome.sweep_dir
    files = {"csv": directory / "results.csv", "markdown": directory / "results.md"}
    write_csv(outcome.rows, sweep, files["csv"])
    write_markdown(outcome.rows, sweep, files["markdown"])
    if outcome.best is not None:
        files["best"] = directory / "best.yaml"
        write_best_config(outcome.best, sweep, config_file, overrides, files["best"])
    if plot_metric(outcome.rows, sweep, directory / "metric_vs_params.png"):
        files["plot"] = directory / "metric_vs_params.png"
    outcome.files = files
    return outcome
