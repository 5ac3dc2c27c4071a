"""YAML loading (``extends``, ``--set``, file:line errors) and validation of every key."""
from recbole_ext.config.loader import find_config_file, load_config_chain, load_yaml
from recbole_ext.config.resolve import ResolvedConfig, resolve
from recbole_ext.config.schema import FRAMEWORK_KEYS, Key, in_range

__all__ = ["FRAMEWORK_KEYS", "Key", "ResolvedConfig", "find_config_file", "in_range", "load_config_chain",
           "load_yaml", "resolve"]
