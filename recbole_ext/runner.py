"""Config → data → model → trainer → run directory. Used by the CLI, sweeps and reproductions.

A run directory (``<output_dir>/<run_name>/``) holds:

- ``config.yaml``    the resolved config (every key, defaults included) and the files it came from
- ``history.json``   per epoch: each loss term, train/valid time, validation metrics
- ``metrics.json``   best validation metrics and epoch, test metrics, wall time, versions, device, status
- ``model.pth``      the best checkpoint (state dict + plain metadata; ``weights_only=True``)
- ``resume.pth``     the last finished epoch's whole training state (:mod:`recbole_ext.resume`)
- ``run.log``         the run's log at INFO or finer whatever ``state`` says: ``state`` sets the console's
  level only, so a quiet console (reproductions run with ``state: WARNING``) still leaves each
  epoch's losses and validation metrics in the file
- ``tensorboard/``

Every file is written atomically, so a killed run leaves complete files, and ``metrics.json`` says
``"status": "running"`` until the run finished. ``run(..., resume_dir=RUN_DIR)`` continues a killed
(or finished, with more epochs) run from ``resume.pth``; ``metrics.json`` lists each resume.
"""
from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

from recbole_ext.compat import SafeConfig, atomic_write_bytes, config_from_checkpoint, load_checkpoint, versions
from recbole_ext.config import ResolvedConfig, resolve
from recbole_ext.config.schema import KEYS_ADDED_LATER
from recbole_ext.data import require_atomic_files
from recbole_ext.data.windows import last_window_loader
from recbole_ext.devices import device_label, hardware_label
from recbole_ext.errors import ConfigError
from recbole_ext.models.trimming import sort_evaluation_by_length
from recbole_ext.resume import ResumeError, config_fingerprint, load_resume_state, restore_trainer, training_is_over
from recbole_ext.trainer import trainer_class, write_json

LOGGER = logging.getLogger("recbole_ext")


@dataclass
class RunResult:
    run_dir: Path
    best_valid_score: float
    best_valid_result: dict[str, float]
    test_result: dict[str, float]
    best_epoch: int | None
    wall_time_s: float


def _float_dict(result: dict | None) -> dict[str, float]:
    return {k: float(v) for k, v in (result or {}).items()}


def plan_run_dir(resolved: ResolvedConfig) -> Path:
    """The run directory's path (created only once RecBole accepted the config)."""
    root = Path(resolved.values.get("output_dir") or "runs")
    name = resolved.values.get("run_name") or "-".join(
        [time.strftime("%Y%m%d-%H%M%S"), resolved.model_name, resolved.dataset, uuid.uuid4().hex[:6]]
    )
    run_dir = (root / name).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"{resolved.where('run_name')}: run directory {run_dir} already exists and is not empty")
    return run_dir


def recbole_config(resolved: ResolvedConfig, checkpoint_dir: Path | None = None) -> SafeConfig:
    """RecBole's Config for a resolved config; RecBole's own rejections become one-line errors."""
    values = dict(resolved.values)
    if "data_path" in values:  # absolute, so the checkpoint's config works from any directory
        values["data_path"] = os.path.abspath(values["data_path"])
    if checkpoint_dir is not None:
        values["checkpoint_dir"] = str(checkpoint_dir)
    try:
        return SafeConfig(model=resolved.model_class, dataset=resolved.dataset, config_dict=values)
    except (ValueError, KeyError, TypeError, NotImplementedError, RuntimeError, AssertionError) as error:
        raise ConfigError(f"{resolved.files[-1] if resolved.files else 'config'}: RecBole rejected the config: {error}") from None


def init_logging(config, log_file: Path | None) -> None:
    """RecBole's console format at ``state``'s level, plus a log file in the run directory (not
    ./log/) at INFO or finer: the file is the run's record, the console only what the caller asked for."""
    import colorlog
    from recbole.utils.logger import RemoveColorFilter, log_colors_config

    level = getattr(logging, str(config["state"] or "INFO").upper(), logging.INFO)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_recbole_ext", False)]:
        root.removeHandler(handler)
        handler.close()
    console = logging.StreamHandler()
    console.setFormatter(colorlog.ColoredFormatter(
        "%(log_color)s%(asctime)-15s %(levelname)s  %(message)s", "%d %b %H:%M", log_colors=log_colors_config))
    console.setLevel(level)
    handlers = [console]
    if log_file is not None:
        file_handler = logging.FileHandler(log_file)
        file_handler.setFormatter(logging.Formatter("%(asctime)-15s %(levelname)s  %(message)s"))
        file_handler.addFilter(RemoveColorFilter())
        file_handler.setLevel(min(level, logging.INFO))
        handlers.append(file_handler)
    for handler in handlers:
        handler._recbole_ext = True
        root.addHandler(handler)
    root.setLevel(min(handler.level for handler in handlers))


def build(config):
    """RecBole's dataset and loaders, then the model, seeded as RecBole seeds them. For models that
    trim padding, full-sort evaluation rows are ordered by length (same metrics, shorter batches);
    models that train on windows get one training row per user (``data/windows.py``)."""
    from recbole.data import create_dataset, data_preparation
    from recbole.utils import init_seed

    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    init_seed(config["seed"], config["reproducibility"])
    model = config.model_class(config, train_data._dataset).to(config["device"])
    if getattr(model, "trains_on_windows", False):  # built from every training row, trained on one per user
        prefixes = len(train_data._dataset)
        train_data = last_window_loader(config, train_data)
        LOGGER.info("training_samples: windows: %d training rows, one per user, instead of %d prefixes",
                    len(train_data._dataset), prefixes)
    if getattr(model, "trims_padding", False):  # evaluation batches of similar lengths trim well
        sort_evaluation_by_length((valid_data, test_data), config["ITEM_LIST_LENGTH_FIELD"])
    return model, dataset, (train_data, valid_data, test_data)


def run(config_file: str | os.PathLike | None = None, overrides: list[str] = (),
        values: dict[str, Any] | None = None, resolved: ResolvedConfig | None = None,
        epoch_callback: Callable[[dict[str, Any]], None] | None = None,
        resume_dir: str | os.PathLike | None = None) -> RunResult:
    """Train and test one config; see the module docstring for what it writes.

    ``epoch_callback`` gets each validated epoch's ``history.json`` entry once its checkpoint (if
    best) is saved (sweeps report it to Ray Tune; a scheduler may end the process there).
    ``resume_dir``: continue that run directory from its ``resume.pth`` instead of starting a new one
    (the config must be the one it trained under, up to ``resume.CHANGEABLE_ON_RESUME``).
    """
    started = time.time()
    resolved = resolved or resolve(config_file, overrides, values)
    require_atomic_files(resolved)
    if resolved.values.get("num_threads"):
        torch.set_num_threads(resolved.values["num_threads"])
    fingerprint = config_fingerprint(resolved.as_dict())
    state = None
    if resume_dir is None:
        run_dir = plan_run_dir(resolved)
    else:
        run_dir = Path(resume_dir).resolve()
        state = load_resume_state(run_dir, fingerprint)
    config = recbole_config(resolved, checkpoint_dir=run_dir)
    metrics = {"status": "running", "model": resolved.model_name, "dataset": resolved.dataset,
               "versions": versions(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if state is not None:
        metrics = _resumed_metrics(run_dir, state, config, metrics)
    metrics["device"] = device_label(config["device"])  # this attempt's: a resume may move to another GPU
    metrics["hardware"] = hardware_label(config["device"])
    run_dir.mkdir(parents=True, exist_ok=True)
    config_text = yaml.safe_dump(
        {**resolved.as_dict(), "_sources": [str(p) for p in resolved.files]}, sort_keys=False)
    atomic_write_bytes(run_dir / "config.yaml", lambda handle: handle.write(config_text.encode()))
    write_json(run_dir / "metrics.json", metrics)
    try:
        return _train_and_test(config, run_dir, metrics, started, epoch_callback, fingerprint, state)
    except BaseException as error:
        metrics.update(status="failed", error=f"{error.__class__.__name__}: {error}")
        write_json(run_dir / "metrics.json", metrics)
        raise


def resume_run(run_dir: str | os.PathLike, overrides: list[str] = ()) -> RunResult:
    """Continue ``run_dir`` under the config it recorded (``config.yaml``), with ``overrides`` on top."""
    config_file = Path(run_dir) / "config.yaml"
    try:
        values = yaml.safe_load(config_file.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ResumeError(f"{config_file}: cannot read the run's config ({error.__class__.__name__}: {error})") from None
    if not isinstance(values, dict):
        raise ResumeError(f"{config_file}: not a run directory's config")
    values.pop("_sources", None)
    return run(values=with_later_keys_at_former_values(values), overrides=overrides, resume_dir=run_dir)


def with_later_keys_at_former_values(stored: dict[str, Any]) -> dict[str, Any]:
    """A run directory's config (every key, defaults included) plus the keys of ``KEYS_ADDED_LATER``
    that its model knows and it lacks, at their former values: the run predates them, so it ran
    without them, whatever today's defaults say (``pack_tokens`` became true by default)."""
    known = resolve(values=stored).values
    return {**{key: former for key, former in KEYS_ADDED_LATER.items() if key in known and key not in stored}, **stored}


def _resumed_metrics(run_dir: Path, state: dict, config, fresh: dict) -> dict:
    """``metrics.json`` of a resumed run: the first start kept, this resume appended, no stale result."""
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        metrics = dict(fresh)
    start_epoch = state["epoch"] + 1
    if metrics.get("status") == "finished" and training_is_over(
            start_epoch, state["cur_step"], config["epochs"], config["stopping_step"], config["eval_step"] > 0):
        raise ResumeError(f"{run_dir}: finished, nothing left to train; raise epochs or stopping_step "
                          "(--set) to train it further")
    for stale in ("error", "best_epoch", "best_valid_score", "valid", "test", "wall_time_s", "epochs_run"):
        metrics.pop(stale, None)
    metrics.update(status="running", versions=versions())
    metrics.setdefault("resumed", []).append({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "from_epoch": start_epoch})
    return metrics


def _train_and_test(config, run_dir: Path, metrics: dict, started: float, epoch_callback=None,
                    fingerprint: str | None = None, state: dict | None = None) -> RunResult:

    init_logging(config, run_dir / "run.log")
    LOGGER.info("run directory: %s", run_dir)
    model, dataset, (train_data, valid_data, test_data) = build(config)
    LOGGER.info(dataset)
    LOGGER.info(model)
    trainer = trainer_class(config)(config, model, run_dir=run_dir)
    elapsed_before = state["elapsed_s"] if state is not None else 0.0
    if fingerprint is not None:
        trainer.keep_resume_state(fingerprint, since=started, elapsed_before_s=elapsed_before)
    show_progress = bool(config["show_progress"])
    after_validation = (lambda epoch, score: epoch_callback(dict(trainer.history[-1]))) if epoch_callback else None
    if state is not None:
        restore_trainer(trainer, train_data, state)
        LOGGER.info("resumed after epoch %d (resume.pth)", state["epoch"])
    if state is not None and training_is_over(trainer.start_epoch, trainer.cur_step, trainer.epochs,
                                              trainer.stopping_step, bool(valid_data) and trainer.eval_step > 0):
        trainer.eval_collector.data_collect(train_data)  # what fit would have done before testing
        best_valid_score, best_valid_result = trainer.best_valid_score, trainer.best_valid_result
    else:
        best_valid_score, best_valid_result = trainer.fit(train_data, valid_data, saved=True, show_progress=show_progress,
                                                          callback_fn=after_validation)
    test_result = trainer.evaluate(test_data, load_best_model=True, show_progress=show_progress)
    # RecBole's early stopping keeps the latest of equally good epochs (it compares with >=).
    best_epoch = next((e["epoch"] for e in reversed(trainer.history) if e.get("valid_score") == float(best_valid_score)), None)
    result = RunResult(run_dir, float(best_valid_score), _float_dict(best_valid_result), _float_dict(test_result),
                       best_epoch, elapsed_before + time.time() - started)
    metrics.update(status="finished", best_epoch=best_epoch, best_valid_score=result.best_valid_score,
                   valid=result.best_valid_result, test=result.test_result, wall_time_s=result.wall_time_s,
                   epochs_run=len(trainer.history), valid_metric=config["valid_metric"])
    write_json(run_dir / "metrics.json", metrics)
    trainer.tensorboard.close()
    LOGGER.info("best valid: %s", result.best_valid_result)
    LOGGER.info("test: %s", result.test_result)
    return result


def evaluate_checkpoint(checkpoint_path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """Rebuild data and model from a checkpoint's own metadata; return valid and test metrics."""
    checkpoint = load_checkpoint(checkpoint_path)
    config = config_from_checkpoint(checkpoint)
    init_logging(config, None)
    model, _, (_, valid_data, test_data) = build(config)
    model.load_state_dict(checkpoint["state_dict"])
    model.load_other_parameter(checkpoint.get("other_parameter"))
    trainer = trainer_class(config)(config, model)
    return {
        "valid": _float_dict(trainer.evaluate(valid_data, load_best_model=False)),
        "test": _float_dict(trainer.evaluate(test_data, load_best_model=False)),
    }
