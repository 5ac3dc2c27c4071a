"""DuoRec and FEARec as SeqTransformer configurations that accept RecBole's flat key names.

``DuoRecExt`` (Qiu et al., WSDM 2022): SASRec + contrastive regularisation between a dropout view
and a same-target view. ``FEARecExt`` (Du et al., SIGIR 2023): DuoRec's losses + the ``fearec``
hybrid attention + the frequency regulariser. Neither shadows RecBole's ``FEARec``.

Both read the keys of RecBole's FEARec / the authors' scripts (``contrast``, ``tau``, ``sim``,
``lmd``, ``lmd_sem``, ``global_ratio``, ``topk_factor``, ``spatial_ratio``, ``dual_domain``,
``std``, ``fredom``, ``fredom_type``), so their YAMLs run unchanged, and turn them into the
``attention`` and ``aux_losses`` slots. The defaults are the paper's model (contrast, FReg, both
domains and the ramp on), unlike RecBole's FEARec.yaml, which switches all four off.
"""
from __future__ import annotations

from typing import Any, Literal

from recbole_ext.config.schema import Key, in_range
from recbole_ext.models.seq_transformer import PROPERTIES, SeqTransformer
from recbole_ext.nn.attention_fearec import topk_lag_count, topk_problem

# RecBole/DuoRec ``contrast`` modes → (pair of views, weight key, term name). Other modes: no term.
CONTRAST_TERMS = {
    "us_x": [("dropout_positive", "lmd_sem", "same_target_contrastive")],
    "un": [("main_dropout", "lmd", "unsupervised_contrastive")],
    "su": [("main_positive", "lmd_sem", "supervised_contrastive")],
}
CONTRAST_TERMS["us"] = CONTRAST_TERMS["un"] + CONTRAST_TERMS["su"]
# FEARec ``fredom_type`` → (pair of views, term name); Eq. 26 is us_x.
FREQUENCY_TERMS = {
    "us_x": [("dropout_positive", "frequency_regularizer")],
    "un": [("main_dropout", "frequency_regularizer_un")],
    "su": [("main_positive", "frequency_regularizer_su")],
}
FREQUENCY_TERMS["us"] = FREQUENCY_TERMS["un"] + FREQUENCY_TERMS["su"]
OFF = ("none", "None")  # RecBole YAMLs write ``None`` as a string
weight = in_range(0.0)
ratio_open_low = in_range(0.0, 1.0, low_open=True)

# Flat keys that become options of the ``fearec`` attention part, one to one.
ATTENTION_KEYS = ("global_ratio", "topk_factor", "spatial_ratio", "dual_domain", "fda", "std", "sfd",
                  "fda_filtered_value", "fda_padding_mask", "fda_train_lags")


class DuoRecExt(SeqTransformer):
    """SASRec + InfoNCE between a dropout view and a same-target view (DuoRec's ``us_x``)."""

    DEFAULT_CONFIG = PROPERTIES / "DuoRecExt.yaml"
    CONFIG_SCHEMA = {
        **SeqTransformer.CONFIG_SCHEMA,
        "contrast": Key(Literal[(*CONTRAST_TERMS, *OFF)] | None,
                        "views contrasted: us_x (dropout vs same-target, the papers'), un, su, us, none"),
        "tau": Key(float, "InfoNCE temperature", in_range(0.0, low_open=True)),
        "sim": Key(Literal["dot", "cos"], "InfoNCE similarity"),
        "lmd": Key(float, "weight of the un (main vs dropout) term", weight),
        "lmd_sem": Key(float, "weight of the us_x / su term (λ1)", weight),
    }

    @classmethod
    def derived_recbole_config(cls, values: dict[str, Any]) -> dict[str, Any]:
        return {**SeqTransformer.derived_recbole_config(values), **cls.derived_parts(values)}

    @classmethod
    def derived_parts(cls, values) -> dict[str, Any]:
        """The ``attention``/``aux_losses`` slots the flat keys describe."""
        return {"aux_losses": cls.contrast_losses(values)}

    @staticmethod
    def contrast_losses(values) -> list[dict[str, Any]]:
        return [
            {"type": "same_target_contrastive", "name": name, "pair": pair, "weight": values[weight_key],
             "temperature": values["tau"], "similarity": values["sim"]}
            for pair, weight_key, name in CONTRAST_TERMS.get(values["contrast"], [])
            if values[weight_key] > 0
        ]

    def __init__(self, config, dataset):
        # Works the same through our runner (which already derived these) and RecBole's own Config.
        for name, value in self.derived_parts(config).items():
            config[name] = value
        super().__init__(config, dataset)


class FEARecExt(DuoRecExt):
    """FEARec: hybrid time/frequency attention with the frequency ramp, CReg and FReg (Eq. 27)."""

    DEFAULT_CONFIG = PROPERTIES / "FEARecExt.yaml"
    CONFIG_SCHEMA = {
        **DuoRecExt.CONFIG_SCHEMA,
        "global_ratio": Key(float, "α: band width as a share of the rfft bins (1 = no ramp)", ratio_open_low),
        "topk_factor": Key(float, "m: the FDA keeps int(m·ln N) lags", in_range(0.0, low_open=True)),
        "spatial_ratio": Key(float, "γ: weight of the time-domain branch", in_range(0.0, 1.0)),
        "dual_domain": Key(bool, "time-domain attention on (false: w/o TDA)"),
        "fda": Key(bool, "frequency-domain attention on (false: w/o FDA)"),
        "std": Key(bool, "ramp band in the time domain (false: w/o STD)"),
        "sfd": Key(bool, "ramp band in the frequency domain (false: w/o SFD)"),
        "fda_filtered_value": Key(bool, "FDA rolls the band-filtered V (paper Eq. 17) instead of V (code)"),
        "fda_padding_mask": Key(bool, "FDA ignores padded positions (code: it does not)"),
        "fda_train_lags": Key(Literal["shared", "per_sample"], "FDA lags in training: one set per batch (code) or per sample"),
        "fredom": Key(bool, "frequency-domain regulariser on (false: w/o FReg)"),
        "fredom_type": Key(Literal[(*FREQUENCY_TERMS, *OFF)] | None, "views the FReg compares: us_x (Eq. 26), un, su, us"),
        "fredom_weight": Key(float, "λ2, the FReg weight (hard-coded 0.1 by the authors)", weight),
    }

    @staticmethod
    def check_config(values: dict[str, Any]):
        yield from SeqTransformer.check_config(values)
        if not (values["dual_domain"] or values["fda"]):
            yield "fda", "dual_domain (TDA) and fda (FDA) are both false: keep at least one branch"
        length = values["MAX_ITEM_LIST_LENGTH"]
        lags = topk_lag_count(values["topk_factor"], length) if length else 1
        if values["fda"] and not 1 <= lags <= length:
            yield "topk_factor", f"{values['topk_factor']} {topk_problem(lags, length)}"

    @classmethod
    def derived_parts(cls, values) -> dict[str, Any]:
        frequency = [
            {"type": "frequency_regularizer", "name": name, "pair": pair, "weight": values["fredom_weight"]}
            for pair, name in FREQUENCY_TERMS.get(values["fredom_type"], [])
            if values["fredom"] and values["fredom_weight"] > 0
        ]
        return {
            "attention": {"type": "fearec", **{key: values[key] for key in ATTENTION_KEYS}},
            "aux_losses": cls.contrast_losses(values) + frequency,
        }
