"""DMIN (Xiao et al., "Deep Multi-Interest Network for Click-through Rate Prediction", CIKM 2020)
as a pointwise CTR model with any order signal: the DMIN rows of CAPE's Table 2.

The layout follows FuxiCTR's DMIN (the library CAPE's Table 2 runs on; specs/cape.md §1.7):

1. **Behavior refiner** (optional, ``behavior_refiner``): one multi-head self-attention block over
   the history, causal and padding-masked: ``s = LN(x + Dropout(MHA(x)))``, ``out = s + FFN(s)``,
   FFN width 2d with ReLU (FuxiCTR's; no second layer norm).
2. **Multi-interest extractor**: a second multi-head self-attention whose heads are kept apart. Head h
   has its own output projection d_head → d, residual, layer norm and FFN, and ends in its own
   DIN-style target attention (an MLP over [t, z_j, t − z_j, t ⊙ z_j], ReLU, masked softmax) that
   pools that head's states into interest h.
3. **Head**: [interest_1 … interest_H ; target item] → RecBole DIN's DNN (Dice, batch norm) → logit,
   BCE on the label (RecBole's DIN supplies the embeddings, the DNN and the CTR contract).

``position`` picks the order signal; CAPE adds it "in both target attention and self attention
with same position embedding dimension" (paper §5.1.2):

- ``none``: no order signal beyond the causal mask (Table 2's None row removes DMIN's own);
- ``learned_absolute`` / ``sinusoidal``: added to the item representations at the input (Naïve);
- ``rope`` / ``rope_half``: rotates queries and keys in both self-attention blocks, and in each
  target attention the history state j by j·g and the target by n·g
  (:mod:`~recbole_ext.models.target_attention`);
- ``cope`` / ``cape``: a :class:`~recbole_ext.nn.position_context.ContextualPositionBias` in each
  self-attention block (queries per head) and in each target attention (the target as query, the
  MLP score as the gates' similarity), each with its own table.

The self-attention blocks take the same position parts as SeqTransformer (the ``POSITION``
registry), so every option works as there. ``target_position_feature`` > 0 adds DMIN's native
position signal (FuxiCTR: 8): a trained vector per position index, concatenated to the target and
projected back to d before each target attention's MLP; it is off by default so that ``position``
alone sets the row's order signal.

Departures from FuxiCTR, on purpose: the target-attention logit is RecBole's MLP score / √d (as in
``DINPos``); Q/K/V projections have biases (RecBole's layout, ``SoftmaxAttention``); the auxiliary
next-behavior loss is not offered (FuxiCTR's default weight is 0, and CAPE's configs set none).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from recbole.model.layers import MLPLayers, SequenceAttLayer
from recbole.model.sequential_recommender.din import DIN
from torch import nn

from recbole_ext.config.schema import Key, in_range
from recbole_ext.errors import ConfigError
from recbole_ext.models.target_attention import (TARGET_POSITIONS, PositionalSequenceAttention,
                                                 item_representation_size, parse_target_position)
from recbole_ext.nn import POSITION, PartSpec
from recbole_ext.nn.attention_softmax import SoftmaxAttention
from recbole_ext.nn.context import AttentionContext, TransformerDims

PROPERTIES = Path(__file__).parent / "properties"
# Position kinds that act on the input only; the target attentions then get no position of their own.
INPUT_POSITIONS = ("none", "learned_absolute", "sinusoidal")


def parse_dmin_position(value, where: str) -> PartSpec:
    """Target-attention kinds plus ``sinusoidal`` (input-level, so DMIN's self-attention can take it)."""
    return parse_target_position(value, where, allowed=(*TARGET_POSITIONS, "sinusoidal"))


def per_head_weight(heads: int, fan_in: int, fan_out: int) -> nn.Parameter:
    """[heads, fan_in, fan_out], each head xavier-normal like a ``Linear(fan_in, fan_out)`` under the
    host's init (DIN's ``_init_weights``), stored for ``x @ W``."""
    return nn.Parameter(torch.stack([nn.init.xavier_normal_(torch.empty(fan_out, fan_in)).T for _ in range(heads)]))


class FeedForward(nn.Module):
    """FuxiCTR DMIN's FFN: Linear(d, 2d) → ReLU → Linear(2d, d), one per head.

    Head-major [H, N, d] throughout: H GEMMs of [N, d] × [d, 2d] (``baddbmm``), where a broadcast
    ``matmul`` over [B, H, L, d] would copy each weight B times and run B·H small products."""

    def __init__(self, size: int, heads: int = 1):
        super().__init__()
        self.up = per_head_weight(heads, size, 2 * size)
        self.up_bias = nn.Parameter(torch.zeros(heads, 1, 2 * size))
        self.down = per_head_weight(heads, 2 * size, size)
        self.down_bias = nn.Parameter(torch.zeros(heads, 1, size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [H, N, d] → [H, N, d]."""
        return torch.baddbmm(self.down_bias, F.relu(torch.baddbmm(self.up_bias, x, self.up)), self.down)


class BehaviorRefiner(nn.Module):
    """Step 1: one post-norm self-attention block (FuxiCTR's ``BehaviorRefinerLayer``)."""

    def __init__(self, dims: TransformerDims):
        super().__init__()
        self.attention = SoftmaxAttention(SoftmaxAttention.Options(), dims, layer_index=0)
        self.dropout = nn.Dropout(dims.hidden_dropout_prob)
        self.layer_norm = nn.LayerNorm(dims.hidden_size, eps=dims.layer_norm_eps)
        self.feed_forward = FeedForward(dims.hidden_size)

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        context.layer_index = 0
        refined = self.layer_norm(hidden + self.dropout(self.attention(hidden, context)))
        return refined + self.feed_forward(refined.flatten(0, 1).unsqueeze(0)).view_as(refined)  # one head


class InterestExtractor(nn.Module):
    """Step 2 up to the target attentions: per-head states [H, B, L, d] (FuxiCTR's
    ``MultiInterestExtractorLayer``: each head its own output projection, residual, norm and FFN),
    head-major so that every per-head product is one batched GEMM."""

    def __init__(self, dims: TransformerDims):
        super().__init__()
        heads, size = dims.n_heads, dims.hidden_size
        self.layer_index = dims.n_layers - 1  # after the refiner, when there is one
        self.attention = SoftmaxAttention(SoftmaxAttention.Options(), dims, layer_index=self.layer_index)
        del self.attention.dense  # heads are projected one by one below, never merged
        self.head_output = per_head_weight(heads, dims.head_size, size)
        self.dropout = nn.Dropout(dims.hidden_dropout_prob)
        self.norm_weight = nn.Parameter(torch.ones(heads, 1, size))
        self.norm_bias = nn.Parameter(torch.zeros(heads, 1, size))
        self.layer_norm_eps = dims.layer_norm_eps
        self.feed_forward = FeedForward(size, heads)

    def forward(self, hidden: torch.Tensor, context: AttentionContext) -> torch.Tensor:
        context.layer_index = self.layer_index
        batch, length, size = hidden.shape
        query, key, value = self.attention.project(hidden, context)
        mixed = self.attention.mix(query, key, value, context)            # [B, H, L, d_head]
        mixed = mixed.transpose(0, 1).reshape(mixed.size(1), batch * length, -1)
        states = hidden.reshape(1, batch * length, size) + self.dropout(torch.bmm(mixed, self.head_output))
        states = torch.addcmul(self.norm_bias, F.layer_norm(states, (size,), eps=self.layer_norm_eps), self.norm_weight)
        return (states + self.feed_forward(states)).view(-1, batch, length, size)


class DMINPos(DIN):
    """DMIN with none / learned_absolute / sinusoidal / rope / cope / cape (module docstring)."""

    DEFAULT_CONFIG = PROPERTIES / "DMINPos.yaml"
    CONFIG_SCHEMA = {
        "position": Key(str | dict, "order signal: none | learned_absolute | sinusoidal | rope | rope_half | cope | "
                                    "cape, in both self-attentions and every target attention", parse=parse_dmin_position),
        "n_heads": Key(int, "heads of both self-attentions = number of interests", in_range(1)),
        "behavior_refiner": Key(bool, "step 1, the behavior refiner's self-attention block"),
        "target_attention_hidden": Key(list[int], "each target attention's MLP widths (ReLU)"),
        "target_position_feature": Key(int, "DMIN's native position vector concatenated to the target "
                                            "(FuxiCTR: 8); 0 = off", in_range(0)),
        "hidden_dropout_prob": Key(float, "dropout on the self-attention outputs", in_range(0.0, 1.0, high_open=True)),
        "attn_dropout_prob": Key(float, "dropout on the self-attention probabilities",
                                 in_range(0.0, 1.0, high_open=True)),
    }

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        del self.attention  # DIN's single target attention; DMIN has one per interest
        size, heads = item_representation_size(self), config["n_heads"]
        if size % heads:
            raise ConfigError(f"n_heads: the item representation size {size} (embedding_size × item features) "
                              f"is not a multiple of n_heads ({heads})")
        # One self-attention layer per block, so per-layer position parts (CAPE/CoPE tables) get one each.
        dims = TransformerDims(hidden_size=size, n_heads=heads, inner_size=2 * size,
                               n_layers=2 if config["behavior_refiner"] else 1,
                               hidden_dropout_prob=config["hidden_dropout_prob"],
                               attn_dropout_prob=config["attn_dropout_prob"], hidden_act="relu",
                               layer_norm_eps=1e-5, max_seq_length=self.max_seq_length)
        position = parse_dmin_position(config["position"], "position")
        self.position = POSITION.build(position, dims)
        self.behavior_refiner = BehaviorRefiner(dims) if config["behavior_refiner"] else None
        self.interest_extractor = InterestExtractor(dims)
        target_position = parse_target_position("none", "position") if position.name in INPUT_POSITIONS else position
        hidden = [4 * size, *config["target_attention_hidden"]]
        self.target_attentions = nn.ModuleList(
            PositionalSequenceAttention(SequenceAttLayer(torch.zeros(1, 1), hidden, "ReLU", True, False),
                                        target_position, size, self.max_seq_length, softmax=True)
            for _ in range(heads))
        feature_size = config["target_position_feature"]
        self.target_position_table = nn.Parameter(torch.zeros(self.max_seq_length, feature_size)) if feature_size else None
        self.target_position_projection = nn.ModuleList(
            nn.Linear(size + feature_size, size) for _ in range(heads)) if feature_size else None
        self.dnn_mlp_layers = MLPLayers([(heads + 1) * size, *self.mlp_hidden_size], activation="Dice",
                                        dropout=self.dropout_prob, bn=True)
        for module in (self.position, self.behavior_refiner, self.interest_extractor, self.target_attentions,
                       self.target_position_projection, self.dnn_mlp_layers):
            if module is not None:
                module.apply(self._init_weights)
        for attention in self.target_attentions:
            attention.init_position_parameters(self._init_weights)

    def item_representations(self, user, item_seq, next_items) -> tuple[torch.Tensor, torch.Tensor]:
        """History [B, L, d] and target [B, d]: every item feature's embedding side by side (DIN's)."""
        sparse, dense = self.embedding_layer(user, torch.cat((item_seq, next_items.unsqueeze(1)), dim=-1))
        features = torch.cat([table for table in (sparse["item"], dense["item"]) if table is not None], dim=-2)
        items = features.flatten(-2)
        return items[:, :-1], items[:, -1]

    def forward(self, user, item_seq, item_seq_len, next_items):
        history, target = self.item_representations(user, item_seq, next_items)
        context = AttentionContext(item_seq=item_seq, causal=True, position=self.position)
        hidden = self.position.embed_input(history, context)
        if self.behavior_refiner is not None:
            hidden = self.behavior_refiner(hidden, context)
        states = self.interest_extractor(hidden, context)                 # [H, B, L, d]
        interests = [self.interest(head, head_states, target, item_seq_len) for head, head_states in enumerate(states)]
        output = self.dnn_mlp_layers(torch.cat([*interests, target], dim=-1))
        return self.dnn_predict_layers(output).squeeze(1)

    def interest(self, head: int, states: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Interest ``head``: its target attention pooling its states [B, L, d] → [B, d]."""
        attention = self.target_attentions[head]
        if self.target_position_table is None:
            return attention(target, states, lengths).squeeze(1)
        # DMIN's native signal: the target seen from position j is W [t ; p_j], one query per key.
        length = states.size(1)
        queries = torch.cat([target.unsqueeze(1).expand(-1, length, -1),
                             self.target_position_table[:length].expand(target.size(0), -1, -1)], dim=-1)
        return attention(target, states, lengths, self.target_position_projection[head](queries)).squeeze(1)
