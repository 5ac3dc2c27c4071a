"""Config files + overrides → a validated :class:`ResolvedConfig`, before any data is loaded.

Layers, lowest first: RecBole's sequential evaluation defaults (so a partial ``eval_args`` like
``{mode: uni100}`` keeps ``order: TO``), the model's default YAML, then the user's files in
``extends`` order, then ``--set``. Every key of the result must be known (see ``schema``);
values of typed keys are checked; the model can add cross-key checks (``check_config``) and keys
RecBole's data pipeline needs (``derived_recbole_config``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recbole_ext.config.loader import MergedConfig, apply_overrides, load_config_chain
from recbole_ext.config.schema import (
    FRAMEWORK_KEYS, RECBOLE_UNDECLARED_MODEL_KEYS, Key, key_from_default, recbole_dataset_defaults, recbole_general_defaults,
    recbole_model_defaults,
)
from recbole_ext.errors import ConfigError, did_you_mean
from recbole_ext.registry import ModelInfo, resolve_model

SEQUENTIAL_EVAL_ARGS = {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full"}


@dataclass
class ResolvedConfig:
    model_name: str
    model_class: type
    model_info: ModelInfo
    dataset: str
    values: dict[str, Any]  # every key for RecBole except model and dataset
    origins: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def where(self, key: str) -> str:
        return self.origins.get(key, "config")

    def as_dict(self) -> dict[str, Any]:
        """The whole resolved config as plain YAML (what a run directory stores)."""
        return {"model": self.model_name, "dataset": self.dataset, **self.values}


def _model_defaults(model_class: type, info: ModelInfo) -> tuple[dict[str, Any], Any]:
    default_file = getattr(model_class, "DEFAULT_CONFIG", None)
    if default_file is not None:  # a preset's defaults may extend another model's
        chain = load_config_chain(default_file)
        return chain.values, chain.where
    if info.source == "recbole":
        return recbole_model_defaults(info.name), lambda key: f"RecBole's {info.name}.yaml"
    return {}, lambda key: "model defaults"


def known_keys(model_class: type, info: ModelInfo, dataset: str, model_defaults: dict) -> dict[str, Key | None]:
    """Every accepted key → its Key (None: accepted, not type-checked)."""
    keys: dict[str, Key | None] = {}
    general = {**recbole_general_defaults(), **recbole_dataset_defaults(dataset)}
    for name, default in general.items():
        keys[name] = key_from_default(name, default)
    for name, default in model_defaults.items():
        keys[name] = key_from_default(name, default, int_may_be_float=info.source == "recbole")
    keys.update(FRAMEWORK_KEYS)
    keys.update(getattr(model_class, "CONFIG_SCHEMA", {}))
    if info.source == "recbole":
        keys.update(dict.fromkeys(RECBOLE_UNDECLARED_MODEL_KEYS.get(info.name, ()), None))
    return keys


def accepted_keys(model_name: str, dataset: str) -> set[str]:
    """The keys a config of ``model_name`` on ``dataset`` may set (what :func:`resolve` checks user keys
    against), for callers that apply one set of settings to models of several families."""
    model_class, info = resolve_model(model_name)
    return set(known_keys(model_class, info, dataset, _model_defaults(model_class, info)[0]))


def _defaults_lookup(user: MergedConfig, overrides: list[str]):
    """The default values of the model the overrides will select (for dotted ``--set`` keys), or None."""
    model_name = user.values.get("model")
    for item in overrides:
        key, _, text = item.partition("=")
        if key.strip() == "model":
            model_name = text.strip()
    try:
        model_class, info = resolve_model(model_name) if isinstance(model_name, str) else (None, None)
    except ConfigError:
        return None  # reported below, with where the name came from
    return _model_defaults(model_class, info)[0].get if model_class is not None else None


def _check_history_masking(checked: dict, full: MergedConfig, sequential: bool) -> None:
    """``eval_mask_history`` acts on full-sort scores of sequential models only; anywhere else it
    would be silently ignored, so it is refused."""
    where = f"{full.where('eval_mask_history')}: eval_mask_history"
    if not sequential:
        raise ConfigError(f"{where}: masks the input window of sequential models; RecBole already masks the "
                          f"history of general models, and labeled (CTR) evaluation ranks nothing")
    mode = (checked.get("eval_args") or {}).get("mode", "full")
    modes = set(mode.values()) if isinstance(mode, dict) else {mode}
    if modes != {"full"}:
        raise ConfigError(f"{where}: masks full-sort scores, but eval_args.mode is {mode!r} "
                          f"(sampled candidates already exclude the user's items)")


def resolve(config_file: str | os.PathLike | None = None, overrides: list[str] = (),
            values: dict[str, Any] | None = None) -> ResolvedConfig:
    """Load, merge and validate; raises :class:`ConfigError` naming file:line or ``--set`` at fault."""
    user = load_config_chain(config_file) if config_file is not None else MergedConfig()
    if values:
        user.layer(values, lambda key: "config dict")
    apply_overrides(user, list(overrides), fallback=_defaults_lookup(user, list(overrides)))
    last_file = str(user.files[-1]) if user.files else "config"

    for required in ("model", "dataset"):
        if required not in user.values:
            raise ConfigError(f"{last_file}: no {required!r} key (set it in the file or with --set {required}=...)")
        FRAMEWORK_KEYS[required].validate(user.values[required], user.where(required))
    model_name, dataset = user.values["model"], user.values["dataset"]
    try:
        model_class, info = resolve_model(model_name)
    except ConfigError as error:
        raise ConfigError(f"{user.where('model')}: {error}") from None

    defaults, default_origin = _model_defaults(model_class, info)
    full = MergedConfig()
    from recbole.utils import ModelType

    if getattr(model_class, "type", None) == ModelType.SEQUENTIAL:
        full.layer({"eval_args": SEQUENTIAL_EVAL_ARGS}, lambda key: "RecBole's sequential defaults")
    full.layer(defaults, default_origin)
    full.layer(user.values, user.where)
    full.files = user.files

    keys = known_keys(model_class, info, dataset, defaults)
    for name in user.values:  # defaults are trusted to be known; user keys are checked in file order
        if name not in keys:
            raise ConfigError(
                f"{user.where(name)}: unknown key {name!r}{did_you_mean(name, keys)} for model {model_name}"
            )
    checked = {}
    for name, value in full.values.items():
        spec = keys.get(name)
        checked[name] = spec.validate(value, f"{full.where(name)}: {name}") if spec is not None else value
    check_config = getattr(model_class, "check_config", None)
    if check_config is not None:
        for name, problem in check_config(checked):
            raise ConfigError(f"{full.where(name)}: {name}: {problem}")
    if checked.get("eval_mask_history"):
        _check_history_masking(checked, full, getattr(model_class, "type", None) == ModelType.SEQUENTIAL)
    derived = getattr(model_class, "derived_recbole_config", None)
    for name, value in (derived(checked) if derived is not None else {}).items():
        if name in user.values and user.values[name] != value:
            raise ConfigError(f"{user.where(name)}: {name}: must be {value!r} for this model configuration")
        checked[name] = value
        full.origins.setdefault(name, "derived from the model configuration")

    # CE scores all items (InfoNCE draws its own negatives): RecBole then needs train_neg_sample_args:
    # None, but its own default is a uniform sampler, so every such config would have to say so. Do
    # it unless the user set it.
    if checked.get("loss_type") in ("CE", "InfoNCE") and "train_neg_sample_args" not in user.values:
        checked["train_neg_sample_args"] = None

    values_for_recbole = {k: v for k, v in checked.items() if k not in ("model", "dataset")}
    return ResolvedConfig(model_name, model_class, info, dataset, values_for_recbole, full.origins, full.files)
