"""CORE (Hou et al., SIGIR 2022, "CORE: Simple and Effective Session-based Recommendation within
Consistent Representation Space"), transformer variant (RecBole's ``dnn_type: trm``).

Representation-consistent encoding (RCE, paper Eq. 3-5): the session is a weighted sum of its own
item embeddings, so sessions and items live in one space::

    x_t = SessDropout(e_{s_t})                          (RecBole's ``sess_dropout``)
    h   = Encoder(LN(x_t + position_t)) ;  α = softmax_t(w·h_t + b) over real positions
    s   = Σ_t α_t x_t                                    (Eq. 5)

Robust distance measuring (RDM, Eq. 7-9): cosine similarity over a temperature, with dropout on the
candidate item embeddings in training (``item_dropout``)::

    ŷ_j = cos(s, ItemDropout(e_j)) / τ ;  loss = CE(ŷ, target)

The encoder is ours (``SeqTransformer``'s position part, input norm/dropout and blocks), so any
attention or position part plugs in; with ``attention: softmax`` and ``position: learned_absolute``
it is RecBole's ``CORE`` numerically (``tests/models/test_backbone_core.py``). Like RecBole, the
encoder is causal, and the whole model is initialised U(-1/√d, 1/√d) (``uniform_init``; parts with
their own init, ``reset_part_parameters``, re-initialise after that).

Differences from RecBole's CORE:

* ``hidden_size`` is the width (RecBole's CORE reads ``embedding_size``); ``dnn_type: ave`` (plain
  mean, no transformer) is not offered: it is not a transformer backbone.
* ``predict`` (sampled evaluation) scores against the *normalised* candidate embeddings, as
  ``full_sort_predict`` and training do; RecBole's ``predict`` uses raw embeddings, so its sampled
  and full rankings disagree. ``recbole_quirks: true`` restores RecBole's ``predict``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.models.backbones import BACKBONE, Backbone
from recbole_ext.nn.dropout import Dropout


@BACKBONE.register("core")
class ConsistentRepresentation(Backbone):
    """CORE-trm: attention-weighted sum of the session's item embeddings, cosine logits / τ."""

    exact_under_trailing_trim = True  # the attentive pooling's softmax masks padding

    flat_defaults = {"temperature": 0.07, "sess_dropout": 0.2, "item_dropout": 0.2}  # RecBole's CORE.yaml

    @dataclass(frozen=True)
    class Options:
        recbole_quirks: bool = False  # predict() against raw (unnormalised) item embeddings, as RecBole
        uniform_init: bool = True  # RecBole CORE's U(-1/√d, 1/√d) for every parameter

    @classmethod
    def check_config(cls, values):
        if values["loss_type"] != "CE":
            yield "loss_type", f"backbone 'core' trains with CE over cosine logits (RecBole's CORE), got {values['loss_type']!r}"

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        impl = model.dims.dropout_impl
        self.temperature = float(self.setting(config, "temperature"))
        self.session_dropout = Dropout(self.setting(config, "sess_dropout"), impl)
        self.candidate_dropout = Dropout(self.setting(config, "item_dropout"), impl)
        self.position_weight = nn.Linear(model.dims.hidden_size, 1)  # RecBole's TransNet.fn

    def reset_model_parameters(self, model):
        if self.options.uniform_init:
            bound = 1.0 / math.sqrt(model.dims.hidden_size)
            for parameter in model.parameters():
                nn.init.uniform_(parameter, -bound, bound)

    def encode_session(self, model, interaction):
        """s = normalise(Σ_t α_t x_t) (Eq. 5), α from the encoder over the dropped-out x; and the pass."""
        item_seq = interaction[model.ITEM_SEQ]
        context = model.attention_context(item_seq, causal=True)
        session_items = self.session_dropout(self.embed_items(model, item_seq, context))
        output = model.encode_embedded(session_items, context)
        logits = self.position_weight(output.hidden).squeeze(-1)
        logits = logits.masked_fill(~context.key_padding, torch.finfo(logits.dtype).min)
        weights = torch.softmax(logits, dim=-1)
        return F.normalize(torch.einsum("bl,bld->bd", weights, session_items), dim=-1), output

    def user_representation(self, model, interaction):
        return self.encode_session(model, interaction)[0]

    def candidates(self, model, items: torch.Tensor | None = None) -> torch.Tensor:
        embedding = model.item_embedding.weight[: model.n_items] if items is None else model.item_embedding(items)
        return F.normalize(embedding, dim=-1)

    def training_loss(self, model, interaction):
        representation, output = self.encode_session(model, interaction)
        # RDM (Eq. 7-9): dropout before normalising, over all rows (the padding row 0 included, as RecBole).
        candidates = F.normalize(self.candidate_dropout(model.item_embedding.weight[: model.n_items]), dim=-1)
        logits = representation @ candidates.T / self.temperature
        return F.cross_entropy(logits, interaction[model.POS_ITEM_ID]), output

    def score_items(self, model, representation, items):
        candidates = model.item_embedding(items) if self.options.recbole_quirks else self.candidates(model, items)
        return (representation * candidates).sum(-1) / self.temperature

    def score_all(self, model, representation):
        return representation @ self.candidates(model).T / self.temperature


def state_dict_from_recbole_core(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """RecBole ``CORE`` (trm) state dict → SeqTransformer's with ``backbone: core``."""
    from recbole_ext.models.recbole_import import state_dict_from_recbole

    renamed = {}
    for name, tensor in state_dict.items():
        name = name.removeprefix("net.")  # TransNet's encoder, position table and norm are the model's
        renamed[name.replace("fn.", "backbone.position_weight.", 1) if name.startswith("fn.") else name] = tensor
    return state_dict_from_recbole(renamed, "SASRec")
