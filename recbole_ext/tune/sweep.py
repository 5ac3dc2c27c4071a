"""Sweep files: read, check every point of the space against the config layer, before Ray starts.

A sweep file (format in CONTRIBUTING.md, "Sweep files") names a validation metric and mode, a
scheduler, the number of samples and a search space whose keys are ``--set`` keys. Extensions:
``name`` (result directory name; default: the file's stem), ``set`` (a mapping of ``--set`` keys
applied to every trial, e.g. ``{epochs: 20}``), ``max_concurrent``, ``cpus_per_trial`` and
``gpus_per_trial`` (defaults for the command-line flags).

Nothing here imports Ray: a bad sweep is a one-line error naming the file, line and key, even
where Ray is not installed.
"""
from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from recbole_ext.config import ResolvedConfig, find_config_file, load_yaml, resolve
from recbole_ext.config.loader import _Loader
from recbole_ext.errors import ConfigError, did_you_mean

DISTRIBUTIONS = ("grid", "choice", "uniform", "loguniform")
SCHEDULERS = {"none": {}, "asha": {"grace_period": 1, "reduction_factor": 2, "max_t": None}}
SWEEP_KEYS = ("name", "metric", "mode", "scheduler", "num_samples", "space", "set", "max_concurrent",
              "cpus_per_trial", "gpus_per_trial")
# Keys each trial gets from `tune` itself: a sweep may not set them.
MANAGED_KEYS = ("output_dir", "run_name", "num_threads", "valid_metric", "valid_metric_bigger")
# Above this many points the space is checked one key at a time only (each check resolves a config, ~20 ms).
FULL_CHECK_LIMIT = 512


def set_arg(key: str, value: Any) -> str:
    """A ``--set`` string for a value: JSON is YAML, and the loader reads ``1e-05`` as a float."""
    return f"{key}={json.dumps(value)}"


@dataclass(frozen=True)
class Dimension:
    """One swept key: ``grid``/``choice`` values, or ``uniform``/``loguniform`` bounds."""

    key: str
    kind: str
    values: tuple
    where: str

    def checked_values(self) -> tuple:
        """The values whose configs must resolve: every listed value, or both bounds of a range."""
        return self.values

    def ray_domain(self):
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        return getattr(tune, self.kind)(*self.values)

    @property
    def logarithmic(self) -> bool:
        return self.kind == "loguniform"


@dataclass(frozen=True)
class Scheduler:
    type: str
    options: dict = field(default_factory=dict)


@dataclass
class Sweep:
    path: Path
    name: str
    metric: str
    mode: str
    scheduler: Scheduler
    num_samples: int
    space: tuple[Dimension, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    max_concurrent: int | None = None
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None

    @property
    def metric_key(self) -> str:
        """The metric as RecBole names it in a validation result (``ndcg@10``)."""
        return self.metric.lower()

    def fixed_overrides(self) -> list[str]:
        return [set_arg(key, value) for key, value in self.fixed.items()]

    def point_overrides(self, point: dict[str, Any]) -> list[str]:
        return [set_arg(dim.key, point[dim.key]) for dim in self.space if dim.key in point]

    def grid_points(self) -> int:
        return math.prod(len(d.values) for d in self.space if d.kind == "grid")

    def trial_count(self) -> int:
        return self.num_samples * self.grid_points()

    def as_dict(self) -> dict[str, Any]:
        """The sweep as plain data (what a resumed sweep must match)."""
        return {"name": self.name, "metric": self.metric, "mode": self.mode,
                "scheduler": {"type": self.scheduler.type, **self.scheduler.options},
                "num_samples": self.num_samples, "set": self.fixed,
                "space": {d.key: {d.kind: list(d.values)} for d in self.space}}


class _SweepFile:
    """The parsed YAML plus line numbers of the keys under ``space`` and ``scheduler``."""

    def __init__(self, path: Path):
        self.path = path
        self.data = load_yaml(path).data
        self.top_lines = load_yaml(path).lines
        self.nested_lines: dict[tuple[str, str], int] = {}
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=_Loader)
        for key_node, value_node in getattr(node, "value", []):
            if isinstance(value_node, yaml.MappingNode):
                for child, _ in value_node.value:
                    self.nested_lines[(key_node.value, str(child.value))] = child.start_mark.line + 1

    def where(self, key: str, child: str | None = None) -> str:
        line = self.nested_lines.get((key, child)) if child is not None else None
        line = line or self.top_lines.get(key)
        label = f"{key}.{child}" if child is not None else key
        return f"{self.path}:{line}: {label}" if line else f"{self.path}: {label}"

    def error(self, key: str, problem: str, child: str | None = None) -> ConfigError:
        return ConfigError(f"{self.where(key, child)}: {problem}")


def find_sweep_file(name: str | os.PathLike) -> Path:
    """A sweep path, or a bare name looked up like configs, also in ``configs/sweeps/``."""
    try:
        return find_config_file(name).resolve()
    except ConfigError:
        try:
            return find_config_file(Path("sweeps") / name).resolve()
        except ConfigError:
            raise ConfigError(f"{name}: sweep file not found (looked where configs are found, and in their sweeps/)") from None


def _number(file: _SweepFile, key: str, value: Any, *, integer=False, minimum=None, child=None, open_low=False):
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (isinstance(value, float) and math.isnan(value)):
        raise file.error(key, f"must be {'an integer' if integer else 'a number'}, got {value!r}", child)
    if minimum is not None and (value <= minimum if open_low else value < minimum):
        raise file.error(key, f"must be {'>' if open_low else '>='} {minimum}, got {value!r}", child)
    return value


def _dimension(file: _SweepFile, key: str, spec: Any) -> Dimension:
    where = file.where("space", key)
    if not isinstance(spec, dict) or len(spec) != 1:
        raise file.error("space", f"expected one of {{{', '.join(f'{d}: ...' for d in DISTRIBUTIONS)}}}, got {spec!r}", key)
    (kind, values), = spec.items()
    if kind not in DISTRIBUTIONS:
        raise file.error("space", f"unknown distribution {kind!r}{did_you_mean(str(kind), DISTRIBUTIONS)} "
                                  f"(known: {', '.join(DISTRIBUTIONS)})", key)
    if not isinstance(values, list):
        raise file.error("space", f"{kind} needs a list, got {values!r}", key)
    if kind in ("grid", "choice"):
        if not values:
            raise file.error("space", f"empty {kind}: give at least one value", key)
        return Dimension(key, kind, tuple(values), where)
    if len(values) != 2:
        raise file.error("space", f"{kind} needs [low, high], got {values!r}", key)
    low, high = (_number(file, "space", v, child=key) for v in values)
    if not low < high:
        raise file.error("space", f"{kind} needs low < high, got {values!r}", key)
    if kind == "loguniform" and low <= 0:
        raise file.error("space", f"loguniform needs low > 0, got {values!r}", key)
    return Dimension(key, kind, (low, high), where)


def _scheduler(file: _SweepFile, spec: Any) -> Scheduler:
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict) or "type" not in spec:
        raise file.error("scheduler", f"expected {{type: {' or '.join(SCHEDULERS)}, ...}}, got {spec!r}")
    kind = spec["type"]
    if kind not in SCHEDULERS:
        raise file.error("scheduler", f"unknown scheduler {kind!r}{did_you_mean(str(kind), SCHEDULERS)} "
                                      f"(known: {', '.join(SCHEDULERS)})")
    options = dict(SCHEDULERS[kind])
    for name, value in spec.items():
        if name == "type":
            continue
        if name not in options:
            known = ", ".join(options) or "none"
            raise file.error("scheduler", f"unknown option {name!r} for {kind}{did_you_mean(name, options)} (known: {known})", name)
        if name == "reduction_factor":
            options[name] = _number(file, "scheduler", value, minimum=1, open_low=True, child=name)
        else:
            options[name] = _number(file, "scheduler", value, integer=True, minimum=1, child=name)
    if kind == "asha" and options["max_t"] is not None and options["grace_period"] > options["max_t"]:
        raise file.error("scheduler", f"grace_period ({options['grace_period']}) exceeds max_t ({options['max_t']})")
    return Scheduler(kind, options)


def parse_sweep(path: str | os.PathLike) -> Sweep:
    """Read a sweep file and check its structure (not yet the configs it makes: see :func:`check_sweep`)."""
    file = _SweepFile(find_sweep_file(path))
    data = file.data
    for key in data:
        if key not in SWEEP_KEYS:
            raise file.error(key, f"unknown sweep key{did_you_mean(str(key), SWEEP_KEYS)} (known: {', '.join(SWEEP_KEYS)})")
    for required in ("metric", "space"):
        if required not in data:
            raise ConfigError(f"{file.path}: no {required!r} key")
    metric = data["metric"]
    if not isinstance(metric, str) or not metric:
        raise file.error("metric", f"must be a metric name such as NDCG@10, got {metric!r}")
    mode = data.get("mode", "max")
    if mode not in ("max", "min"):
        raise file.error("mode", f"must be max or min, got {mode!r}")
    space = data["space"]
    if not isinstance(space, dict) or not space:
        raise file.error("space", "must be a non-empty mapping of --set keys to distributions")
    dimensions = tuple(_dimension(file, str(key), spec) for key, spec in space.items())
    fixed = data.get("set") or {}
    if not isinstance(fixed, dict):
        raise file.error("set", f"must be a mapping of --set keys to values, got {fixed!r}")
    for key in [*space, *fixed]:
        if str(key).split(".")[0] in MANAGED_KEYS:
            section = "space" if key in space else "set"
            raise file.error(section, f"{key} is set by `recbole-ext tune` for each trial", str(key))
    for key in fixed:
        if key in space:
            raise file.error("set", "also swept in space", str(key))
    optional = {}
    for name, integer in (("max_concurrent", True), ("cpus_per_trial", False), ("gpus_per_trial", False)):
        if data.get(name) is not None:
            optional[name] = _number(file, name, data[name], integer=integer, minimum=0, open_low=name != "gpus_per_trial")
    name = data.get("name", file.path.stem)
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise file.error("name", f"must be a plain directory name, got {name!r}")
    num_samples = _number(file, "num_samples", data.get("num_samples", 1), integer=True, minimum=1)
    return Sweep(file.path, name, metric, mode, _scheduler(file, data.get("scheduler", "none")), num_samples,
                 dimensions, {str(k): v for k, v in fixed.items()}, **optional)


def metric_names(values: dict[str, Any]) -> set[str]:
    """The keys of a validation result RecBole will produce for a resolved config."""
    metrics = values.get("metrics") or []
    metrics = [metrics] if isinstance(metrics, str) else metrics
    topk = values.get("topk") or []
    topk = [topk] if isinstance(topk, int) else topk
    return {f"{m.lower()}@{k}" for m in metrics for k in topk} | {m.lower() for m in metrics}


def check_sweep(sweep: Sweep, config_file: str | os.PathLike, overrides: list[str] = ()) -> ResolvedConfig:
    """Resolve the base config and every point of the space; raise a one-line error naming the key.

    Each value is first checked alone (so an error names the swept key), then every combination
    (cross-key checks), unless the space has more than ``FULL_CHECK_LIMIT`` points. Ranges are
    checked at both bounds. Returns the base config (sweep ``set`` and ``overrides`` applied).
    """
    base = [*sweep.fixed_overrides(), *overrides]
    try:
        resolved = resolve(config_file, base)
    except ConfigError as error:
        raise ConfigError(f"{sweep.path}: the base config does not resolve: {error}") from None
    for override in overrides:
        key = override.partition("=")[0].strip()
        if any(dim.key == key for dim in sweep.space):
            raise ConfigError(f"--set {key}: this key is swept by {sweep.path}")
        if key.split(".")[0] in MANAGED_KEYS:
            raise ConfigError(f"--set {key}: set by `recbole-ext tune` for each trial")

    def check(point: dict[str, Any], blame: Dimension | None) -> None:
        try:
            values = resolve(config_file, [*base, *sweep.point_overrides(point)]).values
        except ConfigError as error:
            if blame is not None:
                raise ConfigError(f"{blame.where} = {point[blame.key]!r}: {error}") from None
            raise ConfigError(f"{sweep.path}: space point {point} does not resolve: {error}") from None
        known = metric_names(values)
        if sweep.metric_key not in known:
            raise ConfigError(f"{sweep.path}: metric: {sweep.metric!r} is not a validation metric of the config "
                              f"{point or ''} (metrics x topk give: {', '.join(sorted(known))})")

    check({}, None)
    for dim in sweep.space:
        for value in dim.checked_values():
            check({dim.key: value}, dim)
    if len(sweep.space) > 1 and math.prod(len(d.checked_values()) for d in sweep.space) <= FULL_CHECK_LIMIT:
        for combination in itertools.product(*(d.checked_values() for d in sweep.space)):
            check({d.key: v for d, v in zip(sweep.space, combination)}, None)
    return resolved


def max_epochs(sweep: Sweep, base_values: dict[str, Any]) -> int:
    """The most epochs any trial runs (ASHA's horizon)."""
    swept = next((d for d in sweep.space if d.key == "epochs"), None)
    if swept is None:
        return int(base_values["epochs"])
    return int(max(swept.values))
