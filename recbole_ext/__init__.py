"""recbole-ext: five sequential-recommendation papers as composable RecBole 1.2.1 models.

Importing the package checks the RecBole version and applies every workaround in
:mod:`recbole_ext.compat`, after which RecBole's own entry points (``run_recbole``, ``Config``,
``load_data_and_model``) also accept our models.
"""
__version__ = "0.1.0"

from recbole_ext.requirements import check_recbole_version as _check_recbole_version

_check_recbole_version()

from recbole_ext import compat as _compat  # noqa: E402

_compat.apply()

from recbole_ext.compat import load_data_and_model  # noqa: E402
from recbole_ext.registry import resolve_model  # noqa: E402

__all__ = ["__version__", "load_data_and_model", "resolve_model"]
