"""Resuming a killed run from its last finished epoch, with the result it would have had unkilled.

Paper-budget cells run for hours on CPU (FEARec: minutes per epoch, early stopping after 40 idle
epochs), and a lent GPU comes for 10-minute commands. So after every epoch, once its validation
and best-checkpoint save are done, the trainer rewrites ``resume.pth`` in the run directory
(atomically: a kill leaves the previous epoch's file whole). It holds:

- the weights, the optimizer state, RecBole's early-stopping state (epoch, idle epochs, best score
  and metrics), the per-epoch history and the wall time so far;
- every random generator the next epoch draws from: torch's (CPU, CUDA), numpy's and Python's
  global ones (RecBole's negative sampler draws from numpy's), the training loader's shuffle
  generator (length buckets use it too), and every ``torch.Generator`` a model part keeps
  (Rec-Denoiser's mask noise);
- the config it trained under, so a resume under another config is refused, naming the key.

Restoring all of it makes the rest of a resumed run equal the unkilled one: on CPU, losses and
metrics match exactly (``tests/test_resume.py``). On CUDA, non-deterministic kernels can still make
the last bits differ, as between two unkilled runs. The cost is one file of the size of the weights
plus Adam's two moments, written once per epoch.

``recbole-ext run --resume RUN_DIR`` continues a run; ``recbole-ext reproduce`` resumes a killed
cell by itself. Only how long to train (``epochs``, ``stopping_step``) and how to run
(threads, logging) may change on resume, e.g. to train a finished run further.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from recbole_ext.compat import load_checkpoint, save_checkpoint, saved_other_parameters
from recbole_ext.config.schema import KEYS_ADDED_LATER, SPEED_ONLY_KEYS, without_later_keys_at_former_values
from recbole_ext.errors import CheckpointError, ConfigError

RESUME_FILE = "resume.pth"
# What a resumed run may change: how long and how it trains, never what it trains.
CHANGEABLE_ON_RESUME = frozenset({"epochs", "stopping_step", "num_threads", "show_progress", "state",
                                  "run_name", "output_dir", "gpu_id", "eval_batch_size", *SPEED_ONLY_KEYS})


class ResumeError(ConfigError):
    """A run directory cannot be resumed (no state yet, another config, finished): one line."""


def config_fingerprint(values: dict[str, Any]) -> str:
    """The resolved config minus what may change on resume (and keys added later, at their former
    values: ``KEYS_ADDED_LATER``), as YAML (plain types only)."""
    kept = {key: value for key, value in without_later_keys_at_former_values(values).items()
            if key not in CHANGEABLE_ON_RESUME}
    return yaml.safe_dump(kept, sort_keys=True)


def _model_generators(model: torch.nn.Module):
    """``(module path, attribute)`` → every ``torch.Generator`` held by the model's modules."""
    for path, module in model.named_modules():
        for attribute, value in vars(module).items():
            if isinstance(value, torch.Generator):
                yield (path, attribute), value


def capture_random_state(model: torch.nn.Module, train_loader) -> dict[str, Any]:
    numpy_state = np.random.get_state()
    python_version, python_internal, python_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(numpy_state[1].astype(np.int64)), "position": int(numpy_state[2]),
                  "has_gauss": int(numpy_state[3]), "cached_gaussian": float(numpy_state[4])},
        "python": {"version": python_version, "internal": list(python_internal), "gauss_next": python_gauss},
        "loader": train_loader.generator.get_state(),
        "model": [{"module": path, "attribute": attribute, "device": str(generator.device), "state": generator.get_state()}
                  for (path, attribute), generator in _model_generators(model)],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict[str, Any], model: torch.nn.Module, train_loader) -> None:
    torch.set_rng_state(state["torch"])
    numpy_state = state["numpy"]
    np.random.set_state(("MT19937", numpy_state["keys"].numpy().astype(np.uint32), numpy_state["position"],
                         numpy_state["has_gauss"], numpy_state["cached_gaussian"]))
    python_state = state["python"]
    random.setstate((python_state["version"], tuple(python_state["internal"]), python_state["gauss_next"]))
    train_loader.generator.set_state(state["loader"])
    for saved in state["model"]:  # parts create their generators lazily: a fresh model may have none yet
        generator = torch.Generator(saved["device"])
        generator.set_state(saved["state"])
        setattr(model.get_submodule(saved["module"]), saved["attribute"], generator)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_resume_state(path: Path, trainer, train_loader, fingerprint: str, elapsed_s: float, epoch: int) -> None:
    save_checkpoint(path, {
        "epoch": epoch,
        "cur_step": int(trainer.cur_step),
        "best_valid_score": float(trainer.best_valid_score),
        "best_valid_result": {k: float(v) for k, v in (trainer.best_valid_result or {}).items()} or None,
        "train_loss_dict": {int(k): float(v) for k, v in trainer.train_loss_dict.items()},
        "history": trainer.history,
        "state_dict": trainer.model.state_dict(),
        "other_parameter": saved_other_parameters(trainer.model),
        "optimizer": trainer.optimizer.state_dict(),
        "random": capture_random_state(trainer.model, train_loader),
        "config": fingerprint,
        "elapsed_s": float(elapsed_s),
    })


def load_resume_state(run_dir: Path, fingerprint: str) -> dict[str, Any]:
    """The saved state of ``run_dir``, checked against the config it is resumed under."""
    path = run_dir / RESUME_FILE
    if not path.is_file():
        raise ResumeError(f"{run_dir}: no {RESUME_FILE} (the run stopped before its first epoch ended, or was "
                          "made by a version without resumable runs): start it again")
    try:
        state = load_checkpoint(path)
    except CheckpointError as error:
        raise ResumeError(str(error)) from None
    saved, now = yaml.safe_load(state["config"]), yaml.safe_load(fingerprint)
    # A key made changeable after the state was saved is still in the saved fingerprint: skip it.
    for key in sorted((set(saved) | set(now)) - CHANGEABLE_ON_RESUME):
        before, after = (values.get(key, KEYS_ADDED_LATER.get(key, "<unset>")) for values in (saved, now))
        if before != after:
            raise ResumeError(
                f"{path}: trained with {key}={before!r}, the config now says {after!r}; only "
                f"{', '.join(sorted(CHANGEABLE_ON_RESUME))} may change on resume")
    return state


def restore_trainer(trainer, train_loader, state: dict[str, Any]) -> None:
    """Put a freshly built trainer (model, optimizer, generators) where the saved epoch left it."""
    trainer.model.load_state_dict(state["state_dict"])
    trainer.model.load_other_parameter(state.get("other_parameter"))
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.start_epoch = state["epoch"] + 1
    trainer.cur_step = state["cur_step"]
    trainer.best_valid_score = state["best_valid_score"]
    trainer.best_valid_result = state["best_valid_result"]
    trainer.train_loss_dict = dict(state["train_loss_dict"])
    trainer.history = list(state["history"])
    restore_random_state(state["random"], trainer.model, train_loader)


def training_is_over(start_epoch: int, idle_validations: int, epochs: int, stopping_step: int, validates: bool) -> bool:
    """RecBole's two ways out of ``fit``: past the last epoch, or more idle validations than ``stopping_step``."""
    return start_epoch >= epochs or (validates and idle_validations > stopping_step)
