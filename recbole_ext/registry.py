"""Model registry: entry points of group ``recbole_ext.models`` first, then RecBole's built-ins.

Any installed package can add a model by declaring, in its own metadata::

    [options.entry_points]
    recbole_ext.models =
        MyModel = my_package.models:MyModel

The class follows RecBole's contract (``calculate_loss``, ``predict``, ``full_sort_predict``)
and may set ``DEFAULT_CONFIG`` to the path of its default YAML, which is then always loaded
(RecBole itself only looks inside its own package). ``recbole-ext list`` shows every model and
where it comes from; ``compat.patch_model_lookup`` makes RecBole's own ``get_model`` see them too.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from recbole_ext.errors import UnknownNameError, did_you_mean

PRESET_MODULE = "recbole_ext.models.presets"
PRESET_DIR = Path(__file__).parent / "models" / "presets"  # read without importing torch/RecBole


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESET_DIR.glob("*.yaml"))

ENTRY_POINT_GROUP = "recbole_ext.models"

# Our own model classes (paper presets are YAML files, found by ``preset_names``), importable even from a source checkout that was never pip-installed
# (entry points only exist once the package metadata is installed).
BUILTIN_MODELS = {
    "SeqTransformer": "recbole_ext.models.seq_transformer:SeqTransformer",
    "DINPos": "recbole_ext.models.target_attention:DINPos",
    "DIENPos": "recbole_ext.models.target_attention:DIENPos",
    "DMINPos": "recbole_ext.models.dmin:DMINPos",
    "DuoRecExt": "recbole_ext.models.fearec:DuoRecExt",
    "FEARecExt": "recbole_ext.models.fearec:FEARecExt",
    "CaserExt": "recbole_ext.models.caser:CaserExt",
}

RECBOLE_MODEL_PACKAGES = (
    "recbole.model.general_recommender",
    "recbole.model.context_aware_recommender",
    "recbole.model.sequential_recommender",
    "recbole.model.knowledge_aware_recommender",
)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    source: str  # "recbole-ext", "plugin <distribution>" or "recbole"
    target: str  # "module:Class"

    def load(self) -> type:
        module_name, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attribute)


@lru_cache(maxsize=1)
def plugin_models() -> dict[str, ModelInfo]:
    """Models registered through entry points, plus our built-ins."""
    models = {name: ModelInfo(name, "recbole-ext", target) for name, target in BUILTIN_MODELS.items()}
    for name in preset_names():
        models.setdefault(name, ModelInfo(name, "recbole-ext", f"{PRESET_MODULE}:{name}"))
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        distribution = entry_point.dist.name if entry_point.dist is not None else "?"
        source = "recbole-ext" if distribution == "recbole-ext" else f"plugin {distribution}"
        models[entry_point.name] = ModelInfo(entry_point.name, source, entry_point.value)
    return models


@lru_cache(maxsize=1)
def recbole_models() -> dict[str, ModelInfo]:
    """RecBole's built-in model classes, by class name (read from its model packages)."""
    from recbole.model.abstract_recommender import AbstractRecommender

    models = {}
    for package_name in RECBOLE_MODEL_PACKAGES:
        package = importlib.import_module(package_name)
        for module_info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package_name}.{module_info.name}")
            for attribute, value in vars(module).items():
                if (
                    isinstance(value, type)
                    and issubclass(value, AbstractRecommender)
                    and value.__module__ == module.__name__
                    and attribute.lower() == module_info.name
                ):
                    models[attribute] = ModelInfo(attribute, "recbole", f"{module.__name__}:{attribute}")
    return models


def all_models() -> dict[str, ModelInfo]:
    """Every resolvable model; a plugin name never shadows a RecBole one (see ``check_no_shadowing``)."""
    return {**recbole_models(), **plugin_models()}


def find_registered_model(name: str) -> type | None:
    info = plugin_models().get(name)
    return info.load() if info is not None else None


def resolve_model(name: str) -> tuple[type, ModelInfo]:
    """The class for a model name: plugins first, then RecBole. Unknown names list close ones."""
    info = plugin_models().get(name) or recbole_models().get(name)
    if info is None:
        raise UnknownNameError(f"unknown model {name!r}{did_you_mean(name, all_models())}; `recbole-ext list` shows all")
    return info.load(), info


def shadowed_names() -> list[str]:
    """Plugin model names that collide with RecBole's (they would silently get RecBole's defaults)."""
    return sorted(set(plugin_models()) & set(recbole_models()))
