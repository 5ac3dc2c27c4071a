"""One trial, inside a Ray worker: a normal run through :func:`recbole_ext.runner.run`.

Each validated epoch is reported (``valid/<metric>``, ``epoch``) so a scheduler can stop the
trial; the last report adds the test metrics of the best epoch. A trial interrupted with its sweep
continues from its last finished epoch (``resume.pth``, :mod:`recbole_ext.resume`) after
reporting the epochs it had already validated again, as Ray restarts its result stream. Everything the trial needs
arrives as absolute paths in a :class:`TrialPlan`, because a worker's working directory is not
the driver's.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNS_DIRNAME = "runs"


@dataclass(frozen=True)
class TrialPlan:
    config_file: str          # absolute
    overrides: tuple[str, ...]  # --set strings for every trial (sweep `set`, then the command line)
    space_keys: tuple[str, ...]
    metric: str               # as written in the sweep (valid_metric of every trial)
    mode: str
    runs_dir: str             # absolute: <sweep dir>/runs

    def trial_overrides(self, params: dict[str, Any], trial_id: str, threads: int, gpu_ids: list) -> list[str]:
        from recbole_ext.tune.sweep import set_arg

        managed = [set_arg("output_dir", self.runs_dir), set_arg("run_name", trial_id), set_arg("num_threads", threads),
                   set_arg("valid_metric", self.metric), set_arg("valid_metric_bigger", self.mode == "max")]
        if gpu_ids:  # Ray already narrowed CUDA_VISIBLE_DEVICES; RecBole would reset it from gpu_id
            managed += [set_arg("use_gpu", True), set_arg("gpu_id", ",".join(str(g) for g in gpu_ids))]
        swept = [set_arg(key, params[key]) for key in self.space_keys if key in params]
        return [*self.overrides, *swept, *managed]


def _report_entry(entry: dict[str, Any], node_id: str, run_dir: str) -> dict[str, Any]:
    valid = entry.get("valid") or {}
    return {"epoch": entry["epoch"] + 1, "valid": valid, "train_loss": entry.get("train_loss", {}),
            "node_id": node_id, "run_dir": run_dir}


def _final_report(metrics: dict[str, Any], last_epoch: int, node_id: str, run_dir: str) -> dict[str, Any]:
    # `epoch` repeats the last validated epoch: ASHA's clock (time_attr) does not advance here.
    return {"epoch": last_epoch, "valid": metrics["valid"], "test": metrics["test"],
            "best_epoch": metrics["best_epoch"], "node_id": node_id, "run_dir": run_dir, "finished": True}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_trial(params: dict[str, Any], plan: TrialPlan) -> None:
    """Ray Tune's function trainable."""
    import ray
    from ray import tune

    from recbole_ext.config import resolve
    from recbole_ext.resume import ResumeError, config_fingerprint, load_resume_state
    from recbole_ext.runner import run
    from recbole_ext.trainer import write_json

    context = tune.get_context()
    trial_id = context.get_trial_id()
    runtime = ray.get_runtime_context()
    node_id = runtime.get_node_id()
    threads = max(1, int(runtime.get_assigned_resources().get("CPU", 1)))
    run_dir = Path(plan.runs_dir) / trial_id

    metrics = _read_json(run_dir / "metrics.json")
    if metrics and metrics.get("status") == "finished":
        # Finished before the sweep was interrupted but after Ray last saved its state: replay, don't retrain.
        history = [e for e in _read_json(run_dir / "history.json") or [] if "valid" in e]
        for entry in history:
            tune.report(_report_entry(entry, node_id, str(run_dir)))
        tune.report(_final_report(metrics, history[-1]["epoch"] + 1 if history else 0, node_id, str(run_dir)))
        return
    reported: list[int] = []

    def report_epoch(entry: dict[str, Any]) -> None:
        reported.append(entry["epoch"] + 1)
        tune.report(_report_entry(entry, node_id, str(run_dir)))

    resolved = resolve(plan.config_file, plan.trial_overrides(params, trial_id, threads, ray.get_gpu_ids()))
    state = None
    if run_dir.exists():  # an interrupted attempt of this trial
        try:
            state = load_resume_state(run_dir, config_fingerprint(resolved.as_dict()))
        except ResumeError:  # stopped inside its first epoch: nothing to continue from
            shutil.rmtree(run_dir)
    try:
        for entry in (state or {}).get("history", []):
            if "valid" in entry:
                report_epoch(entry)
        result = run(resolved=resolved, epoch_callback=report_epoch, resume_dir=run_dir if state else None)
    except SystemExit:  # how Ray ends a trial its scheduler stopped (the runner recorded "failed")
        metrics = _read_json(run_dir / "metrics.json") or {}
        metrics.pop("error", None)
        write_json(run_dir / "metrics.json", {**metrics, "status": "stopped", "stopped_after_epoch": reported[-1] if reported else 0})
        raise
    final = {"valid": result.best_valid_result, "test": result.test_result, "best_epoch": result.best_epoch}
    tune.report(_final_report(final, reported[-1] if reported else 0, node_id, str(result.run_dir)))


def trial_dirname(trial) -> str:
    """Ray's per-trial directory: the trial id (as the run directory), short and collision-free."""
    return trial.trial_id


