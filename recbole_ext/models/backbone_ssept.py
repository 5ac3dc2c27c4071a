"""SSE-PT (Wu, Li, Hsieh & Sharpnack, RecSys 2020): SASRec personalised with a user embedding and
regularised by stochastic shared embeddings (SSE; Wu et al., NeurIPS 2019). A Rec-Denoiser Table 2
backbone (specs/recdenoiser.md §1.6).

Input: every position is ``[e_item (d_i); e_user (d_u)]``, so ``hidden_size = d_i + d_u``; positions,
blocks and heads are our SASRec's. Output: candidate ``j`` of user ``u`` scores
``h · [e_j; e_u] = h[:d_i]·e_j + h[d_i:]·e_u`` from the state ``h`` at the read position. The user
term is one number per row, so the representation carries it as a last column,
``[h[:d_i], h[d_i:]·e_u]`` (``d_i + 1`` wide), and scoring needs no user id: the model's sampled and
full-sort scoring, and the CE/BCE/BPR losses, stay the ones of every backbone.

SSE, in training only, as SSE-PT's sampler draws it:

* per row, with probability ``user_replace_prob``, the user id becomes a uniformly drawn user, in the
  input and in the scores alike (negatives are still drawn outside the real user's history);
* per real input position, with probability ``item_replace_prob``, the item there becomes a random
  item, which is then also the previous position's target, and the position's own target becomes
  another random item (on prefixes only the last position's target is trained).

The authors' flags are keep probabilities (``threshold_user``, ``threshold_item``: an id is replaced
when a uniform draw exceeds them). The defaults are their README's ML-1M command, thresholds 0.08
(user) and 0.9 (item), i.e. replacement 0.92 and 0.1. Their default ``user_hidden_units`` and
``item_hidden_units`` are both 50, so ``user_size`` defaults to half the hidden size (100 in the
preset); a ``hidden_size`` override keeps the split.

Deviation: the blocks are our SASRec's (RecBole's post-norm blocks after an input layer norm, no √d
scaling of the embeddings), not the authors' TensorFlow blocks: in Rec-Denoiser's Table 2 the SSE-PT
rows then differ from our SASRec rows by the user embedding and SSE alone.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from recbole_ext.models.backbones import BACKBONE, CausalNextItem
from recbole_ext.models.window_targets import next_item_targets
from recbole_ext.nn.registry import parse_part_spec


@BACKBONE.register("ssept")
class PersonalizedNextItem(CausalNextItem):
    """Causal next-item prediction from ``[item; user]`` inputs, scored against ``[item; user]``."""

    takes_augmented_sequences = False  # the representation reads the row's user
    takes_info_nce = False  # HLLM's cosine scores have no room for the user term
    represents_users_by_state = False  # [h[:d_i], h[d_i:]·e_u], not the state

    @dataclass(frozen=True)
    class Options:
        user_size: int | None = None  # d_u; None: half of hidden_size (SSE-PT's 50 + 50); items get the rest
        user_replace_prob: float = 0.92  # SSE on the user id (1 − the authors' threshold_user 0.08)
        item_replace_prob: float = 0.1  # SSE on input items and targets (1 − threshold_item 0.9)

        def validate(self):
            if self.user_size is not None and self.user_size < 1:
                return f"user_size must be >= 1, got {self.user_size}"
            for name in ("user_replace_prob", "item_replace_prob"):
                if not 0.0 <= getattr(self, name) < 1.0:
                    return f"{name} must be in [0, 1), got {getattr(self, name)}"
            return None

    @staticmethod
    def user_width(options, hidden_size: int) -> int:
        return hidden_size // 2 if options.user_size is None else options.user_size

    @classmethod
    def check_config(cls, values) -> Iterator[tuple[str, str]]:
        options = parse_part_spec(BACKBONE, values["backbone"], "backbone").options
        user_size = cls.user_width(options, values["hidden_size"])
        if not 1 <= user_size < values["hidden_size"]:
            yield "backbone", (f"ssept: user_size {user_size} leaves no item or no user dimensions in hidden_size "
                               f"{values['hidden_size']} (hidden_size = item size + user_size)")

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        user_size = self.user_width(options, model.dims.hidden_size)
        self.item_size = model.dims.hidden_size - user_size
        self.user_embedding = nn.Embedding(model.n_users, user_size)

    def item_embedding_size(self, dims) -> int:
        return self.item_size

    def encoder_inputs(self, model, interaction) -> dict[str, torch.Tensor]:
        return {"users": interaction[model.USER_ID]}

    def embed_items(self, model, item_seq, context):
        users = self.user_embedding(context.inputs["users"])[:, None, :].expand(-1, item_seq.size(1), -1)
        return torch.cat([model.item_embedding(item_seq), users], dim=-1)

    def encode_positions(self, model, interaction, positions):
        states, output = super().encode_positions(model, interaction, positions)
        users = self.user_embedding(interaction[model.USER_ID])
        if states.dim() == 3:  # every position of a window
            users = users[:, None, :]
        user_term = (states[..., self.item_size:] * users).sum(-1, keepdim=True)
        return torch.cat([states[..., : self.item_size], user_term], dim=-1), output

    def score_items(self, model, representation, items):
        return (representation[..., :-1] * model.item_embedding(items)).sum(-1) + representation[..., -1]

    def score_all(self, model, representation):
        return representation[..., :-1] @ model.item_embedding.weight[: model.n_items].T + representation[..., -1:]

    def training_view(self, model, interaction, targets):
        """SSE: the batch with some user and item ids swapped for random ones, and its targets.

        Every draw is made at the full [B, max length] shape whatever the batch's width, so a
        trimmed batch (models/trimming.py) swaps exactly the ids an untrimmed one does.
        """
        item_seq, lengths, users = interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN], interaction[model.USER_ID]
        device, rows, width = item_seq.device, item_seq.size(0), item_seq.size(1)
        if self.options.user_replace_prob > 0:
            swapped = torch.rand(rows, device=device) < self.options.user_replace_prob
            users = torch.where(swapped, torch.randint(1, model.n_users, (rows,), device=device), users)
        if self.options.item_replace_prob > 0:
            full = (rows, model.max_seq_length)
            replaced = (item_seq > 0) & (torch.rand(full, device=device)[:, :width] < self.options.item_replace_prob)
            random_inputs = torch.randint(1, model.n_items, full, device=device)[:, :width]
            random_targets = torch.randint(1, model.n_items, full, device=device)[:, :width]
            item_seq = torch.where(replaced, random_inputs, item_seq)
            if targets.dim() == 2:  # windows: the target at t is the (possibly swapped) item at t + 1
                targets = next_item_targets(item_seq, lengths, interaction[model.POS_ITEM_ID])
                targets = torch.where(replaced, random_targets, targets)
            else:  # prefixes: the last position's target
                last = (torch.arange(rows, device=device), lengths - 1)
                targets = torch.where(replaced[last], random_targets[last], targets)
        view = {model.ITEM_SEQ: item_seq, model.ITEM_SEQ_LEN: lengths, model.USER_ID: users}
        return view, targets
