"""What a config key may hold: our keys are typed and range-checked; RecBole's pass through.

A key is known when it is one of ours (``FRAMEWORK_KEYS``), declared by the model
(``CONFIG_SCHEMA`` or its default YAML), or one of RecBole's (its property YAMLs and argument
lists). Anything else is a typo and an error. RecBole keys whose default is a number or a flag are
type-checked against that default; a few get ranges (``RECBOLE_RANGES``).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from recbole_ext.nn.registry import check_type


# Keys added after runs had been saved (reproduction caches, resumable runs), each with the value
# that does what runs made before it did. At that value a key is left out of cache keys and resume
# fingerprints (:func:`without_later_keys_at_former_values`), so a new switch, off by default,
# neither orphans finished cells nor stops half-trained ones from resuming. A switch on by default
# (``pack_tokens``, since 2026-11-23) gives new cells new keys, as it should (they train differently);
# a run directory that predates it resumes at its former value (``runner.with_later_keys_at_former_values``).
# ``ft_ratio`` (2026-12-01) is derived for the cloze on prefixes only: its former value is what
# RecBole's transform read when the key was absent.
KEYS_ADDED_LATER: dict[str, Any] = {"pack_tokens": False, "training_samples": "prefixes", "nce_negatives": 512,
                                    "nce_threshold": 0.99, "block_layout": "post_ln", "ft_ratio": 0.0}


# Switches that change how fast a run computes, never what: the same outputs and the same random
# stream (each one's test proves it; ``prune_unread_states``: tests/models/test_pruning.py). They are
# left out of cache keys and may change on resume, so a new one never orphans a finished cell.
SPEED_ONLY_KEYS = frozenset({"prune_unread_states"})


def without_later_keys_at_former_values(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items()
            if not (key in KEYS_ADDED_LATER and value == KEYS_ADDED_LATER[key])}


@dataclass(frozen=True)
class Key:
    """A typed config key. ``check`` returns a problem description or None; ``parse`` may
    validate deeper (e.g. a part spec) and raise :class:`ConfigError` itself."""

    hint: Any
    doc: str = ""
    check: Callable[[Any], str | None] | None = None
    parse: Callable[[Any, str], Any] | None = None

    def validate(self, value: Any, where: str) -> Any:
        from recbole_ext.errors import ConfigError

        value = check_type(value, self.hint, where)
        if self.check is not None and value is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"{where}: {problem}")
        if self.parse is not None:
            self.parse(value, where)
        return value


def in_range(low: float | None = None, high: float | None = None, *, low_open=False, high_open=False):
    """A ``check`` for low <= value <= high (open ends with ``low_open``/``high_open``)."""

    def check(value):
        if isinstance(value, float) and math.isnan(value):
            return "must be a number, got nan"
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            left = "(" if low_open else "["
            right = ")" if high_open else "]"
            return f"must be in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}, got {value}"
        return None

    return check


FRAMEWORK_KEYS: dict[str, Key] = {
    "model": Key(str, "registered model name (`recbole-ext list`)"),
    "dataset": Key(str, "dataset name: atomic files under data_path/<dataset>/ (ml-100k ships with RecBole)"),
    "bf16": Key(bool, "train under bfloat16 autocast (CPU and CUDA); evaluation stays fp32"),
    "output_dir": Key(str, "parent directory of run directories"),
    "run_name": Key(str | None, "run directory name (default: time-model-dataset-id)"),
    "num_threads": Key(int | None, "torch intra-op threads (default: torch's choice)", in_range(1)),
    "compile": Key(bool, "torch.compile the training loss (off by default: no gain on this project's CPU; "
                         "docs/performance.md)"),
    "eval_mask_history": Key(bool, "full-sort evaluation of sequential models scores the items of each user's input "
                                   "window -inf, as HLLM's evaluation does (CAPE Table 3); RecBole masks none"),
    "length_bucketing": Key(int, "training batches from length-sorted pools of this many batches; 0 = off "
                                 "(data/bucketing.py)", in_range(0)),
}

RECBOLE_RANGES: dict[str, Callable[[Any], str | None]] = {
    "epochs": in_range(0),
    "train_batch_size": in_range(1),
    "eval_batch_size": in_range(1),
    "learning_rate": in_range(0, low_open=True),
    "weight_decay": in_range(0),
    "eval_step": in_range(0),
    "stopping_step": in_range(1),
    "MAX_ITEM_LIST_LENGTH": in_range(1),
    "mask_ratio": in_range(0, 1, low_open=True, high_open=True),
    "worker": in_range(0),
}

# Keys RecBole reads that none of its property YAMLs or argument lists name.
RECBOLE_EXTRA_KEYS = {
    "nproc", "world_size", "ip", "port", "offset", "local_rank", "additional_feat_suffix",
    "numerical_features", "discretization", "benchmark_filename", "valid_neg_sample_args",
    "test_neg_sample_args", "eval_neg_sample_args", "ft_ratio", "config_file", "log_dir",
}


# Keys RecBole's models read although their own property YAML does not name them (found by
# scanning ``config["..."]`` in recbole/model/sequential_recommender against the YAMLs; ``device``
# and the BERT4Rec/SHAN field names are set by RecBole itself).
RECBOLE_UNDECLARED_MODEL_KEYS = {
    "FEARec": {"contrast", "tau", "sim", "use_filter"},
    "HRM": {"reg_weight"},
}


COUNT_NAME = re.compile(r"(^n_|^num|_num$|size|len|layer|head|step|epoch|batch|seed|hop|window|order|dim|^k$|topk$)")


def recbole_properties_dir() -> Path:
    import recbole

    return Path(recbole.__file__).parent / "properties"


def read_plain_yaml(path: Path) -> dict:
    from recbole_ext.config.loader import load_yaml

    return load_yaml(path).data


@functools.lru_cache(maxsize=1)
def recbole_general_defaults() -> dict[str, Any]:
    """RecBole's general keys with their defaults (None where it has no default)."""
    from recbole.utils import argument_list

    properties = recbole_properties_dir()
    defaults: dict[str, Any] = {}
    for name in ("general_arguments", "training_arguments", "evaluation_arguments", "dataset_arguments"):
        defaults.update(dict.fromkeys(getattr(argument_list, name)))
    defaults.update(dict.fromkeys(RECBOLE_EXTRA_KEYS))
    for path in [properties / "overall.yaml", properties / "dataset" / "sample.yaml",
                 *sorted((properties / "quick_start_config").glob("*.yaml"))]:
        defaults.update(read_plain_yaml(path))
    return defaults


def recbole_model_defaults(model_name: str) -> dict[str, Any]:
    path = recbole_properties_dir() / "model" / f"{model_name}.yaml"
    return read_plain_yaml(path) if path.is_file() else {}


def recbole_dataset_defaults(dataset: str) -> dict[str, Any]:
    path = recbole_properties_dir() / "dataset" / f"{dataset}.yaml"
    return read_plain_yaml(path) if path.is_file() else {}


def key_from_default(name: str, default: Any, int_may_be_float: bool = False) -> Key | None:
    """A lenient Key for a RecBole key, inferred from its default's type (None: no check).

    ``int_may_be_float``: RecBole's model YAMLs write some ratios as integers (FEARec's
    ``global_ratio: 1``, ``spatial_ratio: 0``), so there an integer default admits floats too,
    unless its name says it counts something (``n_layers``, ``hidden_size``, ...)."""
    check = RECBOLE_RANGES.get(name)
    if isinstance(default, bool):
        return Key(bool, check=check)
    if isinstance(default, int):
        numeric = int_may_be_float and name not in RECBOLE_RANGES and not COUNT_NAME.search(name)
        return Key(int | float if numeric else int, check=check)
    if isinstance(default, float):
        return Key(float, check=check)
    if check is not None:
        return Key(Any, check=check)
    return None
