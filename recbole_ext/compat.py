"""Every workaround for RecBole 1.2.1 on today's stack (numpy 2, torch >= 2.6, current Ray).

One place, one function per breakage, each with a test in ``tests/test_compat.py`` that fails
without it. ``apply()`` runs them all once; ``import recbole_ext`` calls it. The numbers in the
comments were measured on the project's 2-core CPU machine (``../shared/notes/recbole-compat.md``).

| workaround | breakage |
|---|---|
| :func:`add_numpy2_aliases` | ``Config()`` dies on numpy 2 (``np.float_`` was removed) |
| :func:`import_recbole_models_without_anomaly` | importing RecBole's ``sine.py`` turns on autograd anomaly mode for the whole process (~40 % of CPU step time) |
| :class:`SafeConfig` | RecBole's ``Config`` parses and ``eval``\\ s ``sys.argv`` and ``eval``\\ s string values of ``config_dict`` |
| :func:`save_checkpoint` / :func:`load_checkpoint` + trainer patches | torch >= 2.6 loads with ``weights_only=True``; RecBole pickles its whole ``Config`` into checkpoints, so every reload fails |
| :func:`unique_checkpoint_file` | RecBole names checkpoints with 1-second resolution: concurrent runs overwrite each other |
| :func:`tune_glibc_malloc` | glibc returns large activation buffers to the OS every step (page faults: ~30 % of CPU time) |
| :func:`flush_denormals` | weights that only an L2 term moves decay to subnormal floats, on which x86 CPUs compute through microcode assists: Caser's forward 105x, its training step 27x slower (``benchmarks/denormals.py``); a Beauty validation pass went from 6.5 s to 255 s |
| :func:`patch_model_lookup` | RecBole resolves models by name inside its own package and never finds an outside model's default YAML |
| :func:`~recbole_ext.data.reading.patch_atomic_reader` | RecBole reads every atomic file with pandas' Python parser, before every run: ML-1M's ``create_dataset`` takes 4x the time it takes with the C parser, used where it returns the same frame (``benchmarks/startup.py``, ``tests/data/test_reading.py``) |
| :func:`~recbole_ext.data.augmentation.patch_sequential_augmentation` | RecBole builds every prefix row of a sequential dataset in a Python loop: most of an ML-1M run's start-up (the same rows, from tensor ops: ``benchmarks/startup.py``) |
"""
from __future__ import annotations

import ctypes
import importlib.abc
import importlib.metadata
import os
import pickle
import sys
import time
import uuid
from enum import Enum
from pathlib import Path
from typing import Any

from recbole_ext.errors import CheckpointError
from recbole_ext.files import atomic_write_bytes  # noqa: F401  (re-exported: its callers import it from here)

from recbole_ext.requirements import RECBOLE_VERSION  # noqa: F401  (re-exported)
CHECKPOINT_FORMAT = "recbole-ext-checkpoint/1"
TRUST_PICKLE_ENV = "RECBOLE_EXT_TRUST_PICKLED_CHECKPOINTS"
MALLOC_ENV = "RECBOLE_EXT_MALLOC_TUNING"
FLUSH_DENORMALS_ENV = "RECBOLE_EXT_FLUSH_DENORMALS"


def add_numpy2_aliases() -> None:
    """RecBole's ``Config.compatibility_settings`` reads ``np.float_`` & co., removed in numpy 2."""
    import numpy as np

    for name, value in (("float_", np.float64), ("complex_", np.complex128), ("unicode_", np.str_)):
        if name not in np.__dict__:
            setattr(np, name, value)


def import_recbole_models_without_anomaly() -> None:
    """Import RecBole's model packages, then undo the anomaly mode ``sine.py`` switches on at import."""
    import torch

    was_enabled = torch.is_anomaly_enabled()
    import recbole.model.general_recommender  # noqa: F401
    import recbole.model.sequential_recommender  # noqa: F401  (sine.py: set_detect_anomaly(True))

    torch.autograd.set_detect_anomaly(was_enabled)


def tune_glibc_malloc() -> bool:
    """Keep freed activation buffers in the process instead of returning them to the OS.

    glibc serves blocks above its mmap threshold (dynamic, capped at 32 MiB) with ``mmap`` and
    unmaps them on ``free``: a training step of SASRec at batch 2048 then page-faults ~0.8 M times.
    ``M_MMAP_THRESHOLD`` cannot be raised past that cap (glibc ignores larger values, also from
    ``MALLOC_MMAP_THRESHOLD_``), so mmap is switched off (``M_MMAP_MAX=0``; thread arenas still fall
    back to mmap when their heap cannot grow) and the heap top is only trimmed beyond 2 GiB.
    No system package is needed (tcmalloc/jemalloc via ``LD_PRELOAD`` do the same). Opt out with
    ``RECBOLE_EXT_MALLOC_TUNING=0``. Returns whether the settings were applied.
    """
    if os.environ.get(MALLOC_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (absent on musl: leave its allocator alone)
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_max = -1, -2, -4
    return bool(
        libc.mallopt(m_mmap_max, 0)
        and libc.mallopt(m_trim_threshold, 2**31 - 1)
        and libc.mallopt(m_top_pad, 64 << 20)
    )


def flush_denormals() -> bool:
    """Compute with subnormal floats as zero on the CPU (x86 FTZ/DAZ), in every thread started later.

    A weight that only weight decay or an L2 term moves shrinks geometrically and, some epochs in,
    becomes subnormal (below 1.2e-38 in fp32). Caser's horizontal filters behind a ReLU that stopped
    firing are such weights: after three Beauty epochs 37% of them were below 1e-30 and 3.5% already
    subnormal, and x86 CPUs handle each product with a subnormal through a microcode assist. With 37%
    of the filters subnormal, the layer's forward ran 105x and its training step 27x slower at two
    threads (``benchmarks/denormals.py``), and one validation pass took 255 s instead of 6.5 s.
    Flushing changes values far below anything fp32 training resolves.

    The flags live in each thread's control register, and OpenMP's worker threads copy it from the
    thread that starts them, at the first parallel operation. So this must run before that, which is
    why ``import recbole_ext`` does it; :func:`denormals_flushed_in_all_threads` tells whether it
    reached the workers, and a CPU run's log warns when it did not. Opt out with
    ``RECBOLE_EXT_FLUSH_DENORMALS=0``. Returns whether the flags were set (False on CPUs without them).
    """
    if os.environ.get(FLUSH_DENORMALS_ENV, "1") == "0":
        return False
    return bool(torch.set_flush_denormal(True))


def flush_denormals_missed_threads() -> bool:
    """Whether this CPU flushes (and the user did not opt out) but some intra-op thread started before
    the flags were set; setting them again here reaches only the calling thread."""
    return flush_denormals() and not denormals_flushed_in_all_threads()


def denormals_flushed_in_all_threads() -> bool:
    """Whether every intra-op thread flushes subnormal results to zero.

    Squares a tensor of 1e-20 large enough for ``torch`` to split it over all its threads: a thread
    without the flags writes its share of the products as the subnormal 1e-40 instead of zero.
    """
    small = torch.full((1 << 22,), 1e-20)
    return bool((small * small).count_nonzero() == 0)


add_numpy2_aliases()  # before anything below imports RecBole's Config

import torch  # noqa: E402
from recbole.config import Config  # noqa: E402


class SafeConfig(Config):
    """RecBole's ``Config`` without reading ``sys.argv`` and without ``eval`` on string values.

    Stock ``Config`` turns every ``--key=value`` of the host program's argv into a config key
    (``recbole-ext run --config=x.yaml`` would inject ``config``; Ray workers inject
    ``gcs-address`` & co.) and ``eval``\\ s the values. Our config layer has already parsed and
    validated every value, so nothing here needs to be parsed again.
    """

    def _load_cmd_line(self) -> dict:
        return {}

    def _load_variable_config_dict(self, config_dict: dict | None) -> dict:
        return dict(config_dict or {})


# ----------------------------------------------------------------------------------------------
# Checkpoints: a state dict plus plain metadata, readable with torch.load(weights_only=True).


def _plain(value: Any) -> Any:
    """A YAML/JSON-able copy of a config value (enums by name, devices and classes as strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.name
    if value is None:
        return None
    for plain_type in (bool, int, float, str):  # exact builtins: torch.load(weights_only) refuses subclasses
        if isinstance(value, plain_type):
            return plain_type(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return str(value)


def versions() -> dict[str, str]:
    import numpy
    import pandas

    from recbole_ext import __version__

    found = {
        "recbole_ext": __version__,
        "recbole": importlib.metadata.version("recbole"),
        "torch": torch.__version__,  # a str subclass that weights_only loading refuses
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "python": sys.version.split()[0],
    }
    return {name: str(version) for name, version in found.items()}


def checkpoint_metadata(config: Config) -> dict:
    """What is needed to rebuild the config of a run: the external (user-given) keys, plainly."""
    external = {k: v for k, v in config.external_config_dict.items() if k not in ("model", "dataset")}
    return {
        "model": config["model"],
        "dataset": config["dataset"],
        "config": _plain(external),
        "versions": versions(),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    state = {"format": CHECKPOINT_FORMAT, **state}
    atomic_write_bytes(path, lambda handle: torch.save(state, handle))


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu") -> dict:
    """Load a checkpoint with ``weights_only=True``; refuse pickled RecBole ones unless trusted.

    A stock RecBole checkpoint unpickles a whole ``Config`` (arbitrary code on load). It is read
    only when ``RECBOLE_EXT_TRUST_PICKLED_CHECKPOINTS=1`` says the file is trusted.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        reason = next((line.strip() for line in str(error).splitlines() if "Unsupported" in line), "pickled objects")
        if "Unsupported global" not in reason:  # no pickled object in the way: a damaged or foreign file
            raise CheckpointError(f"{path}: not a readable checkpoint (UnpicklingError: {reason})") from None
        if os.environ.get(TRUST_PICKLE_ENV) != "1":
            raise CheckpointError(
                f"{path}: holds pickled objects (e.g. a stock RecBole checkpoint; {reason}); loading it could run "
                f"arbitrary code, so it is refused. If you trust the file, set {TRUST_PICKLE_ENV}=1"
            ) from None
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
    except (RuntimeError, EOFError) as error:
        raise CheckpointError(f"{path}: not a readable checkpoint ({error.__class__.__name__}: {error})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path}: not a RecBole/recbole-ext checkpoint (no 'state_dict')")
    return checkpoint


def config_from_checkpoint(checkpoint: dict) -> Config:
    """Rebuild the run's config from a checkpoint (ours: plain metadata; trusted legacy: the pickled Config)."""
    metadata = checkpoint.get("metadata")
    if metadata is None:
        return checkpoint["config"]  # trusted legacy pickle
    return SafeConfig(model=metadata["model"], dataset=metadata["dataset"], config_dict=metadata["config"])


def unique_checkpoint_file(checkpoint_dir: str, model_name: str) -> str:
    """RecBole's ``<model>-<time to the second>.pth`` plus a random suffix, so runs never share a file."""
    stamp = time.strftime("%b-%d-%Y_%H-%M-%S")
    return os.path.join(checkpoint_dir, f"{model_name}-{stamp}-{uuid.uuid4().hex[:8]}.pth")


def saved_other_parameters(model) -> dict:
    """``model.other_parameter()`` without the model's own submodules. RecBole's DIN and DIEN list
    their embedding layer there, which pickles a module that weights-only loading refuses; its
    weights are in the state dict already, and the model rebuilds the layer from the dataset."""
    submodules = {id(module) for module in model.modules()}
    return {name: value for name, value in model.other_parameter().items() if id(value) not in submodules}


def _trainer_save_checkpoint(self, epoch, verbose=True, **kwargs):
    if not self.config["single_spec"] and self.config["local_rank"] != 0:
        return
    saved_model_file = kwargs.pop("saved_model_file", self.saved_model_file)
    save_checkpoint(
        saved_model_file,
        {
            "epoch": epoch,
            "cur_step": self.cur_step,
            "best_valid_score": float(self.best_valid_score),
            "state_dict": self.model.state_dict(),
            "other_parameter": saved_other_parameters(self.model),
            "optimizer": self.optimizer.state_dict(),
            "metadata": checkpoint_metadata(self.config),
        },
    )
    if verbose:
        self.logger.info(f"Saving current: {saved_model_file}")


def _trainer_load_weights(self, checkpoint_file) -> dict:
    checkpoint = load_checkpoint(checkpoint_file, map_location=self.device)
    self.model.load_state_dict(checkpoint["state_dict"])
    self.model.load_other_parameter(checkpoint.get("other_parameter"))
    return checkpoint


def _trainer_resume_checkpoint(self, resume_file):
    resume_file = str(resume_file)
    self.saved_model_file = resume_file
    checkpoint = _trainer_load_weights(self, resume_file)
    self.start_epoch = checkpoint["epoch"] + 1
    self.cur_step = checkpoint["cur_step"]
    self.best_valid_score = checkpoint["best_valid_score"]
    self.optimizer.load_state_dict(checkpoint["optimizer"])
    self.logger.info(f"Checkpoint loaded. Resume training from epoch {self.start_epoch}")


def _wrap_trainer_evaluate(original_evaluate):
    def evaluate(self, eval_data, load_best_model=True, model_file=None, show_progress=False):
        if eval_data and load_best_model:
            checkpoint_file = model_file or self.saved_model_file
            _trainer_load_weights(self, checkpoint_file)
            self.logger.info(f"Loading model structure and parameters from {checkpoint_file}")
        return original_evaluate(self, eval_data, load_best_model=False, show_progress=show_progress)

    evaluate.__wrapped__ = original_evaluate
    evaluate.__doc__ = original_evaluate.__doc__
    return evaluate


def _wrap_trainer_init(original_init):
    def __init__(self, config, model):
        original_init(self, config, model)
        self.saved_model_file = unique_checkpoint_file(self.checkpoint_dir, config["model"])

    __init__.__wrapped__ = original_init
    return __init__


def patch_trainer_checkpoints() -> None:
    """Make RecBole's ``Trainer`` (and every trainer built on it) write and read safe, unique checkpoints."""
    from recbole.trainer import Trainer

    if getattr(Trainer, "_recbole_ext_patched", False):
        return
    Trainer.__init__ = _wrap_trainer_init(Trainer.__init__)
    Trainer._save_checkpoint = _trainer_save_checkpoint
    Trainer.resume_checkpoint = _trainer_resume_checkpoint
    Trainer.evaluate = _wrap_trainer_evaluate(Trainer.evaluate)
    Trainer._recbole_ext_patched = True


def load_data_and_model(model_file):
    """Drop-in for ``recbole.quick_start.load_data_and_model`` that reads checkpoints safely.

    Returns ``(config, model, dataset, train_data, valid_data, test_data)`` like RecBole's.
    """
    from logging import getLogger

    from recbole.data import create_dataset, data_preparation
    from recbole.utils import get_model, init_logger, init_seed

    checkpoint = load_checkpoint(model_file)
    config = config_from_checkpoint(checkpoint)
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)
    logger = getLogger()
    logger.info(config)
    dataset = create_dataset(config)
    logger.info(dataset)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    init_seed(config["seed"], config["reproducibility"])
    model = get_model(config["model"])(config, train_data._dataset).to(config["device"])
    model.load_state_dict(checkpoint["state_dict"])
    model.load_other_parameter(checkpoint.get("other_parameter"))
    return config, model, dataset, train_data, valid_data, test_data


# ----------------------------------------------------------------------------------------------
# Model lookup: plugin names and default YAMLs inside RecBole's own entry points.

_GET_MODEL_MODULES = ("recbole.utils", "recbole.utils.utils", "recbole.config.configurator")
_QUICK_START = "recbole.quick_start.quick_start"


def _lookup_with_registry(original_get_model):
    def get_model(model_name):
        from recbole_ext.registry import find_registered_model

        model_class = find_registered_model(model_name)
        return model_class if model_class is not None else original_get_model(model_name)

    get_model.__wrapped__ = original_get_model
    return get_model


def _patch_quick_start(module) -> None:
    module.get_model = _lookup_with_registry(getattr(module.get_model, "__wrapped__", module.get_model))
    module.load_data_and_model = load_data_and_model


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ``recbole.quick_start`` when (if ever) it is imported: importing it eagerly would
    import Ray, which is optional and slow to import."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _QUICK_START:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_then_patch(module, exec_module=exec_module):
                    exec_module(module)
                    _patch_quick_start(module)

                spec.loader.exec_module = exec_then_patch
                return spec
        return None


def _wrap_internal_config(original):
    def _load_internal_config_dict(self, model, model_class, dataset):
        original(self, model, model_class, dataset)
        default_file = getattr(model_class, "DEFAULT_CONFIG", None)
        if default_file is not None:
            from recbole_ext.config.loader import load_config_chain

            self.internal_config_dict.update(load_config_chain(default_file).values)

    _load_internal_config_dict.__wrapped__ = original
    return _load_internal_config_dict


def patch_model_lookup() -> None:
    """``get_model`` tries the plugin registry first; an outside model's ``DEFAULT_CONFIG`` YAML is loaded."""
    for name in _GET_MODEL_MODULES:
        module = sys.modules.get(name) or __import__(name, fromlist=["get_model"])
        if not hasattr(module.get_model, "__wrapped__"):
            module.get_model = _lookup_with_registry(module.get_model)
    if not hasattr(Config._load_internal_config_dict, "__wrapped__"):
        Config._load_internal_config_dict = _wrap_internal_config(Config._load_internal_config_dict)
    if _QUICK_START in sys.modules:
        _patch_quick_start(sys.modules[_QUICK_START])
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def silence_known_warnings() -> None:
    """RecBole's pandas chained-assignment FutureWarnings (harmless under pandas < 3, which we pin)
    and its deprecated ``torch.cuda.amp.GradScaler`` call print screens of text on every run."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"recbole\.")
    warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp\.GradScaler.*", category=FutureWarning)


def apply() -> None:
    """Run every workaround (idempotent). ``import recbole_ext`` calls this."""
    add_numpy2_aliases()
    silence_known_warnings()
    tune_glibc_malloc()
    flush_denormals()
    import_recbole_models_without_anomaly()
    patch_model_lookup()
    patch_trainer_checkpoints()
    from recbole_ext.data.augmentation import patch_sequential_augmentation
    from recbole_ext.data.reading import patch_atomic_reader
    from recbole_ext.metrics import register_metrics

    patch_atomic_reader()
    patch_sequential_augmentation()
    register_metrics()

