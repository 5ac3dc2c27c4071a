"""Registries of parts and their typed options.

A part is an ``nn.Module`` registered under a name in one of the slot registries
(``ATTENTION``, ``POSITION``, ``AUX_LOSS``, ``BACKBONE``) with a dataclass ``Options`` that lists
its YAML options, their types and defaults. YAML names a part either by name
(``attention: softmax``) or as a mapping with ``type`` plus options
(``attention: {type: softmax, scale: 0.1}``). :func:`parse_part_spec` validates such a spec
(unknown option → error with "did you mean", wrong type → error naming the option) so a config
is checked completely before any data is loaded.

Other packages can add parts through the entry-point groups ``recbole_ext.<slot>``
(e.g. ``recbole_ext.attention``), exactly like models.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Generic, Literal, TypeVar

from recbole_ext.errors import ConfigError, UnknownNameError, did_you_mean

T = TypeVar("T")


@dataclass(frozen=True)
class NoOptions:
    """Options of a part that has none."""


@dataclass(frozen=True)
class PartSpec:
    """A validated part choice: its registered name and its typed options."""

    name: str
    options: Any


class Registry(Generic[T]):
    """Name → part class, with entry-point discovery and close-name suggestions."""

    def __init__(self, slot: str):
        self.slot = slot
        self.entry_point_group = f"recbole_ext.{slot}"
        self._parts: dict[str, type] = {}
        self._entry_points_loaded = False

    def register(self, name: str) -> Callable[[type], type]:
        def decorate(cls: type) -> type:
            if name in self._parts and self._parts[name] is not cls:
                raise ValueError(f"{self.slot} part {name!r} is registered twice")
            if not hasattr(cls, "Options"):
                cls.Options = NoOptions
            self._parts[name] = cls
            return cls

        return decorate

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for entry_point in importlib.metadata.entry_points(group=self.entry_point_group):
            if entry_point.name not in self._parts:
                self.register(entry_point.name)(entry_point.load())

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._parts)

    def get(self, name: str, where: str = "") -> type:
        self._load_entry_points()
        if name not in self._parts:
            prefix = f"{where}: " if where else ""
            raise UnknownNameError(
                f"{prefix}unknown {self.slot} {name!r}{did_you_mean(name, self._parts)}; "
                f"known: {', '.join(sorted(self._parts)) or 'none registered'}"
            )
        return self._parts[name]

    def build(self, spec: PartSpec, *args, **kwargs):
        return self.get(spec.name)(spec.options, *args, **kwargs)


def parse_part_spec(registry: Registry, raw: Any, where: str) -> PartSpec:
    """Validate ``raw`` (a name or a mapping with ``type``) against the part's ``Options``."""
    if isinstance(raw, PartSpec):
        return raw
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a {registry.slot} name or a mapping with 'type', got {raw!r}")
    if "type" not in raw:
        raise ConfigError(f"{where}: a {registry.slot} mapping needs 'type' (one of {', '.join(registry.names())})")
    name = raw["type"]
    part = registry.get(str(name), where)
    options = {k: v for k, v in raw.items() if k != "type"}
    return PartSpec(str(name), build_options(part.Options, options, f"{where} ({name})"))


def build_options(options_cls: type, values: dict, where: str):
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    for key in values:
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise ConfigError(f"{where}: unknown option {key!r}{did_you_mean(key, fields)}; options: {known}")
    hints = typing.get_type_hints(options_cls)
    checked = {key: check_type(value, hints[key], f"{where}.{key}") for key, value in values.items()}
    try:
        options = options_cls(**checked)
    except TypeError as error:  # a required option is missing
        raise ConfigError(f"{where}: {error}") from None
    validate = getattr(options, "validate", None)
    if validate is not None:
        problem = validate()
        if problem:
            raise ConfigError(f"{where}: {problem}")
    return options


_ACCEPTED: dict[Any, tuple[type, ...]] = {
    bool: (bool,), str: (str,), int: (int,), float: (int, float), dict: (dict,), list: (list, tuple),
    type(None): (type(None),),
}
_DESCRIPTIONS = {bool: "true/false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
                 list: "a list", type(None): "null"}


def check_type(value: Any, hint: Any, where: str) -> Any:
    """Check ``value`` against a simple type hint; ints are accepted for floats (and converted)."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for option in arguments:
            with contextlib.suppress(ConfigError):
                return check_type(value, option, where)
        raise ConfigError(f"{where}: expected {_describe(hint)}, got {value!r}")
    if origin is Literal:
        if value not in arguments:
            choices = ", ".join(repr(a) for a in arguments)
            raise ConfigError(f"{where}: expected one of {choices}, got {value!r}{did_you_mean(str(value), map(str, arguments))}")
        return value
    base = origin or hint  # list[int] → list, dict[str, Any] → dict
    if base not in _ACCEPTED:
        raise TypeError(f"unsupported option type {hint!r} at {where}")
    if not isinstance(value, _ACCEPTED[base]) or (isinstance(value, bool) and base in (int, float)):
        raise ConfigError(f"{where}: expected {_describe(base)}, got {value!r}")
    if base is list and arguments:
        return [check_type(item, arguments[0], f"{where}[{i}]") for i, item in enumerate(value)]
    return float(value) if base is float else value


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    return _DESCRIPTIONS.get(hint, getattr(hint, "__name__", str(hint)))
