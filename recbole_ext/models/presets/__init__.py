"""Paper models as presets: one YAML file per model in this folder, nothing else to write.

``presets/EulerFormer.yaml`` makes a model named ``EulerFormer``: a :class:`SeqTransformer`
subclass generated on first use whose ``DEFAULT_CONFIG`` is that file, which ``extends`` the
transformer's defaults (``../properties/SeqTransformer.yaml``) or another preset and picks parts::

    extends: ../properties/SeqTransformer.yaml
    attention: {type: euler}
    aux_losses: [{type: phase_contrastive, weight: 1.0e-5}]

The registry lists presets without importing anything (``registry.preset_names``), and RecBole, pickled
references and ``recbole-ext list`` resolve ``recbole_ext.models.presets:<Name>`` through the
module ``__getattr__`` below. A preset that needs code (extra config keys, a different loss) is a
real class registered in ``recbole_ext.registry.BUILTIN_MODELS`` instead — keep those rare.
Why not one Python class per preset (the design card's sketch): each class would be three lines
repeating its file name, and adding a paper model would touch code, registry and setup.cfg.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PRESETS = Path(__file__).parent


@lru_cache(maxsize=None)
def preset_class(name: str) -> type:
    from recbole_ext.models.seq_transformer import SeqTransformer

    path = PRESETS / f"{name}.yaml"
    if not path.is_file():
        raise AttributeError(f"no preset {name!r} in {PRESETS}")
    first_line = next((line for line in path.read_text().splitlines() if line.startswith("#")), "")
    doc = first_line.lstrip("# ").strip() or f"Preset {name} of SeqTransformer ({path.name})."
    return type(name, (SeqTransformer,), {"DEFAULT_CONFIG": path, "__module__": __name__, "__doc__": doc})


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return preset_class(name)
