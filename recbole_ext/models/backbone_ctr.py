"""The transformer as a click-through-rate model: CAPE Table 2's SASRec and BST rows (specs/cape.md §1.7).

Every row of labeled data is (history, candidate item, label). The candidate is written after the
history, the sequence ``[h_1 … h_n, candidate]`` is encoded by the model's blocks, with whatever
attention and position parts the config picks (None / Naïve / RoPE / CoPE / CAPE are position
parts), and a pooled state goes through an MLP to the click logit::

    s   = Pool(Encoder([h_1 … h_n, c]))        pool: the candidate's state (target) or the mean over real positions
    ŷ   = σ(MLP([s ; e_c]))                    trained with pointwise BCE on the label field

* ``causal: true`` with ``pooling: target`` is SASRec as a CTR model. CAPE's code does not ship it
  (§6.3 item 1); this is the spec's inferred construction: the candidate's state after causal
  attention over the history.
* ``causal: false`` is BST (Chen et al. 2019, FuxiCTR's ``BST``): attention both ways over
  ``[history; target]``, pooled by ``seq_pooling_type`` (``target`` or ``mean``). Its native
  position feature is *concatenated* to the item embedding; here positions are the model's position
  part (added, or inside the attention), which is what Table 2 varies.
* The MLP reads the pooled state with the candidate's embedding beside it, as FuxiCTR's models feed
  the target's embedding to their DNN (``dnn_hidden_units [1024, 512, 256]``, the authors' configs).

With ``MAX_ITEM_LIST_LENGTH`` L the model reads up to L tokens: a full history loses its oldest item
to make room for the candidate, as BERT4Rec's evaluation [MASK] does. For 100 history items, as the
reczoo data's, set L = 101 (BST's n = 101 in the authors' code).

Only labeled evaluation applies (``eval_args.mode: labeled``; AUC, LogLoss, SampleGAUC): the score
of a row is the click probability of its own candidate, so there is no full ranking.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbones import BACKBONE, Backbone, append_after_history


def _mode(eval_args) -> str | None:
    mode = eval_args.get("mode") if isinstance(eval_args, dict) else None
    return mode.get("test") if isinstance(mode, dict) else mode


@BACKBONE.register("ctr")
class CandidateInSequence(Backbone):
    """Encodes ``[history; candidate]`` and scores the candidate's click probability."""

    exact_under_trailing_trim = True  # causal, or both ways with padded keys masked: real states ignore padding
    trailing_slots = 1  # the candidate's slot after the last history item
    takes_augmented_sequences = False
    encodes_candidate = True

    @dataclass(frozen=True)
    class Options:
        causal: bool = True
        pooling: Literal["target", "mean"] = "target"
        head_hidden: list[int] = (1024, 512, 256)

        def validate(self):
            if any(width <= 0 for width in self.head_hidden):
                return f"head_hidden widths must be positive, got {list(self.head_hidden)}"
            return None

    @classmethod
    def check_config(cls, values):
        def value(key):  # ``values``: the resolver's dict, or RecBole's Config (no ``get``)
            return values[key] if key in values else None

        if _mode(value("eval_args")) != "labeled":
            yield "eval_args", "backbone 'ctr' scores labeled rows: set eval_args mode: labeled (metrics AUC, LogLoss, SampleGAUC)"
        sampling = value("train_neg_sample_args")  # RecBole's Config turns null into distribution 'none'
        if sampling is not None and not (isinstance(sampling, dict) and sampling.get("distribution") == "none"):
            yield "train_neg_sample_args", "backbone 'ctr' trains on the labels of its rows: set train_neg_sample_args: null"
        if not value("LABEL_FIELD"):
            yield "LABEL_FIELD", "backbone 'ctr' needs the label field's name (LABEL_FIELD: label)"

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        self.causal = options.causal
        self.label_field = config["LABEL_FIELD"]
        hidden = model.dims.hidden_size
        layers, width = [], 2 * hidden
        for size in options.head_hidden:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(model.dims.hidden_dropout_prob)]
            width = size
        self.head = nn.Sequential(*layers, nn.Linear(width, 1))

    def candidate_logits(self, model, interaction) -> tuple[torch.Tensor, object]:
        candidates = interaction[model.ITEM_ID]
        sequence, position = append_after_history(interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN],
                                                  candidates, model.max_seq_length)
        if self.options.pooling == "target":
            output = model.encode(sequence, causal=self.causal, reads=position)
            pooled = output.at(position)
        else:
            output = model.encode(sequence, causal=self.causal)
            real = (sequence > 0).unsqueeze(-1).to(output.hidden.dtype)
            pooled = (output.hidden * real).sum(1) / real.sum(1)
        features = torch.cat([pooled, model.item_embedding(candidates).to(pooled.dtype)], dim=-1)
        return self.head(features).squeeze(-1), output

    def training_loss(self, model, interaction):
        logits, output = self.candidate_logits(model, interaction)
        return F.binary_cross_entropy_with_logits(logits.float(), interaction[self.label_field].float()), output

    def user_representation(self, model, interaction):
        """The row's click logit: in this backbone a row's state already holds its candidate."""
        return self.candidate_logits(model, interaction)[0]

    def score_items(self, model, representation, items):
        return torch.sigmoid(representation.float())

    def score_all(self, model, representation):
        raise ConfigError("backbone 'ctr' scores labeled rows only; full ranking needs a next-item backbone (sasrec)")
