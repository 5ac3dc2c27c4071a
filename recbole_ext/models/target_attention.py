"""DIN and DIEN with an order signal inside the target attention: CAPE's Table 2 models.

``DINPos`` and ``DIENPos`` are RecBole's ``DIN``/``DIEN`` (pointwise CTR models; labeled
evaluation with AUC/LogLoss) whose target-attention unit (RecBole's ``SequenceAttLayer``: an MLP
over [t, h_j, t - h_j, t ⊙ h_j]) takes a ``position`` key:

- ``none``: RecBole's model (same parameters, same random draws; scores equal to float rounding,
  :meth:`PositionalSequenceAttention.mlp_scores`);
- ``learned_absolute``: the paper's "Naïve" PE, a trained vector per position index (dim = the item
  representation) added to the attention's keys;
- ``rope`` / ``rope_half``: rotary embedding (Su et al. 2021) before the MLP: history item j (counted
  from the oldest, 0-based) is turned by j·g and the target by n·g, n the user's history length, i.e.
  the target sits right after its history (the spec's inferred reading, specs/cape.md §1.6: "rotate
  h_j, and t at position n+1"). The pooled vectors stay unrotated, as RoPE leaves values alone.
  ``rope`` pairs dims (2t, 2t+1), as the SASRec/BST rows' ``rope``; ``rope_half`` pairs (t, t + d/2),
  the LLaMA layout of the authors' unwired ``RotaryEmbedding``. With an MLP similarity the score is
  not a function of j − n alone (only the t ⊙ h_j block's pair sums are); the paper leaves this open.
- ``cape`` / ``cope``: :class:`~recbole_ext.nn.position_context.ContextualPositionBias` on the
  attention logits with the target item as the query (CAPE Eqs. 1-8; the gates use the same MLP
  logit as the attention, as the authors' code); options as for the self-attention parts
  (``pos_dim``, ``max_positions``, ``gate``, ``gate_mask``).

``target_attention_softmax`` normalises the scores with a masked softmax. Defaults are RecBole's:
false for DIN (it pools with the raw masked scores), true for DIEN (its interest-evolving
attention); the authors' DIN+CAPE configs use a softmax (``din_use_softmax: True``). The logit is
RecBole's: the MLP score divided by √d.

``gate_mask: official`` in target attention reproduces the authors' DIN: gates come from the scores
with padded slots set to 0 (gate 1 - σ(0) = 0.5 each, so RecBole's trailing padding shifts every
real position). ``strict`` sums gates over real history items only (Eq. 2).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from recbole.data.dataset import DIENDataset
from recbole.model.layers import SequenceAttLayer
from recbole.model.sequential_recommender.dien import DIEN
from recbole.model.sequential_recommender.din import DIN
from recbole.utils import FeatureSource, FeatureType
from torch import nn

from recbole_ext.config.schema import Key
from recbole_ext.errors import ConfigError
from recbole_ext.nn import POSITION, PartSpec, parse_part_spec
from recbole_ext.nn.attention_euler import rotary_frequencies, rotate_pairs
from recbole_ext.nn.position_context import ContextualPositionBias
from recbole_ext.nn.position_relative import HalfSplitRotaryPosition, RotaryPosition

PROPERTIES = Path(__file__).parent / "properties"
TARGET_POSITIONS = ("none", "learned_absolute", "rope", "rope_half", "cope", "cape")
ROTARY_PAIRING = {"rope": RotaryPosition.pairing, "rope_half": HalfSplitRotaryPosition.pairing}


def parse_target_position(value, where: str, allowed: tuple[str, ...] = TARGET_POSITIONS) -> PartSpec:
    """A position spec as for SeqTransformer (name or mapping with options), limited to the kinds
    that make sense with one query (the target) and an MLP similarity (``allowed``; a host model
    with self-attention too, as DMIN, may allow input-level kinds)."""
    spec = parse_part_spec(POSITION, value, where)
    if spec.name not in allowed:
        raise ConfigError(f"{where}: target attention takes position {', '.join(allowed)}, not {spec.name!r}")
    for combining in ("keep_absolute", "absolute"):
        if getattr(spec.options, combining, False):
            raise ConfigError(f"{where}: {combining} is for self-attention models; target attention takes one position kind")
    return spec


class PositionalSequenceAttention(nn.Module):
    """RecBole's ``SequenceAttLayer`` with a position encoding inside; takes over that layer's MLP
    (``att_mlp_layers``, ``dense``) so parameter names, values and checkpoints stay DIN's/DIEN's."""

    def __init__(self, attention: SequenceAttLayer, position: PartSpec, query_size: int, max_length: int,
                 softmax: bool):
        super().__init__()
        self.att_mlp_layers = attention.att_mlp_layers
        first = self.att_mlp_layers.mlp_layers[:2]
        if not (isinstance(first[0], nn.Dropout) and first[0].p == 0 and isinstance(first[1], nn.Linear)
                and not any(isinstance(m, nn.BatchNorm1d) for m in self.att_mlp_layers.mlp_layers)):
            raise ValueError("target attention expects RecBole's SequenceAttLayer MLP (dropout 0, no batch norm), "
                             "whose first layer mlp_scores takes by blocks")
        self.dense = attention.dense
        self.return_seq_weight = attention.return_seq_weight
        self.softmax = softmax
        self.gate_mask = getattr(position.options, "gate_mask", "strict")
        self.position_embedding = nn.Embedding(max_length, query_size) if position.name == "learned_absolute" else None
        self.rotary_pairing = ROTARY_PAIRING.get(position.name)
        if self.rotary_pairing is not None:
            if query_size % 2:
                raise ConfigError(f"position: {position.name} pairs dimensions: the item representation size "
                                  f"{query_size} must be even")
            self.register_buffer("rotary_frequencies",
                                 rotary_frequencies(query_size, 1, "hidden", position.options.base)[0], persistent=False)
        self.contextual = None
        if position.name in ("cape", "cope"):
            options = position.options
            self.contextual = ContextualPositionBias(
                query_size, options.max_positions or max_length + 1, options.pos_dim, options.gate)

    def mlp_scores(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """RecBole's score MLP over [t, h, t − h, t ⊙ h], ``queries`` [B, 1 or T, d], ``keys`` [B, T, d]
        → [B, T, 1], with the first layer's weight taken by blocks: W [t; h; t − h; t ⊙ h] =
        (W_t + W_d) t + (W_h − W_d) h + W_p (t ⊙ h). The target's term is computed once per row instead
        of once per key, and the [B, T, 4d] concatenation is never built (DIN's attention MLP reads
        half the features and DMIN's step loses its largest copies). Equal to the concatenated form
        up to float rounding (tested); exact because the layer's dropout is 0 and it has no batch norm."""
        layers = self.att_mlp_layers.mlp_layers
        first = layers[1]
        w_target, w_history, w_difference, w_product = first.weight.chunk(4, dim=1)
        hidden = (F.linear(queries, w_target + w_difference, first.bias) + F.linear(keys, w_history - w_difference)
                  + F.linear(queries * keys, w_product))
        return self.dense(layers[2:](hidden))

    def init_position_parameters(self, init_weights) -> None:
        """Initialise only the position parameters, with the host model's init (xavier for DIN/DIEN,
        as FuxiCTR), so the rest keeps the values the host drew."""
        for module in (self.position_embedding, self.contextual):
            if module is not None:
                module.apply(init_weights)
        if self.contextual is not None:
            self.contextual.reset_part_parameters()

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, keys_length: torch.Tensor,
                per_key_queries: torch.Tensor | None = None) -> torch.Tensor:
        """``queries`` [B, d] (the target), ``keys`` [B, T, d], ``keys_length`` [B] → pooled [B, 1, d]
        or weights [B, 1, T] (``return_seq_weight``), as ``SequenceAttLayer``. ``per_key_queries``
        [B, T, d] replaces the target in the MLP, one per key (DMIN's native position feature); the
        position machinery still reads ``queries``."""
        length = keys.size(1)
        if self.position_embedding is not None:
            keys = keys + self.position_embedding.weight[:length]
        positions = torch.arange(length, device=keys.device)
        valid = positions[None, :] < keys_length[:, None]
        compared_queries = queries.unsqueeze(1) if per_key_queries is None else per_key_queries
        compared_keys = keys
        if self.rotary_pairing is not None:  # history item j at angle j·g, the target next to its history at n·g
            frequencies = self.rotary_frequencies
            compared_keys = rotate_pairs(keys, positions[:, None] * frequencies, self.rotary_pairing)
            compared_queries = rotate_pairs(compared_queries, keys_length[:, None, None].to(frequencies.dtype)
                                            * frequencies, self.rotary_pairing)
        logits = self.mlp_scores(compared_queries, compared_keys).squeeze(-1) / queries.size(-1) ** 0.5  # RecBole's
        if self.contextual is not None:  # CAPE Eq. 8: a_j ∝ exp(sim_item(t, h_j) + z[p_j])
            if self.gate_mask == "official":  # the authors' DIN zeroes padded scores before the gates
                gate_logits, gate_valid = logits.masked_fill(~valid, 0.0), None
            else:
                gate_logits, gate_valid = logits, valid[:, None, :]
            logits = logits + self.contextual(queries[:, None, :], gate_logits[:, None, :], gate_valid)[:, 0]
        weights = logits.masked_fill(~valid, float("-inf") if self.softmax else 0.0)
        if self.softmax:
            weights = torch.softmax(weights, dim=-1)
        weights = weights.unsqueeze(1)
        return weights if self.return_seq_weight else torch.matmul(weights, keys)


TARGET_ATTENTION_KEYS = {
    "position": Key(str | dict, "order signal in the target attention: none | learned_absolute | rope | rope_half | cope | cape",
                    parse=parse_target_position),
    "target_attention_softmax": Key(bool, "normalise the target attention's scores with a masked softmax"),
}


def item_representation_size(model) -> int:
    """d of DIN/DIEN's item representation: one embedding per non-float item feature (RecBole's count)."""
    return model.att_list[0] // 4


def install_positional_attention(model, attention: SequenceAttLayer, config) -> PositionalSequenceAttention:
    layer = PositionalSequenceAttention(attention, parse_target_position(config["position"], "position"),
                                        item_representation_size(model), model.max_seq_length,
                                        config["target_attention_softmax"])
    layer.init_position_parameters(model._init_weights)
    return layer


class DINPos(DIN):
    """DIN (Zhou et al., KDD 2018) with none / learned_absolute / rope / cope / cape in its target attention."""

    DEFAULT_CONFIG = PROPERTIES / "DINPos.yaml"
    CONFIG_SCHEMA = TARGET_ATTENTION_KEYS

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.attention = install_positional_attention(self, self.attention, config)


class DIENPos(DIEN):
    """DIEN (Zhou et al., AAAI 2019) with none / learned_absolute / rope / cope / cape in its interest-evolving attention."""

    DEFAULT_CONFIG = PROPERTIES / "DIENPos.yaml"
    CONFIG_SCHEMA = TARGET_ATTENTION_KEYS

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        evolving = self.interest_evolution
        evolving.attention_layer = install_positional_attention(self, evolving.attention_layer, config)


class BenchmarkDIENDataset(DIENDataset):
    """RecBole's ``DIENDataset`` samples the negative history DIEN's auxiliary loss reads only while
    it augments sequences, which it skips for benchmark files (pre-built histories, as the reczoo CTR
    data): DIEN then fails in its first batch with ``KeyError: 'neg_item_id_list'``. This subclass
    samples them for benchmark rows too, by DIEN's rule: per history item, a uniform item other than
    it. Without benchmark files it is RecBole's class unchanged."""

    def __init__(self, config):
        super().__init__(config)
        if config["benchmark_filename"] is not None:
            self._sample_negative_histories()

    def _sample_negative_histories(self) -> None:
        histories = self.inter_feat[self.item_id_list_field]
        lengths = np.fromiter((len(history) for history in histories), dtype=np.int64, count=len(histories))
        flat = np.concatenate([np.asarray(history, dtype=np.int64) for history in histories]) \
            if len(histories) else np.zeros(0, dtype=np.int64)
        negatives = np.asarray(self.seq_sampler.sample_neg_sequence(flat))
        self.inter_feat[self.neg_item_list_field] = np.split(negatives, np.cumsum(lengths)[:-1])
        self.set_field_property(self.neg_item_list_field, FeatureType.TOKEN_SEQ, FeatureSource.INTERACTION,
                                self.field2seqlen[self.item_id_list_field])


def _register_dien_dataset() -> None:
    """RecBole picks ``recbole.data.dataset.<model>Dataset`` by model name: DIEN and DIENPos both get
    :class:`BenchmarkDIENDataset` (DIENPos reads what DIEN reads)."""
    import recbole.data.dataset as datasets

    datasets.DIENDataset = datasets.DIENPosDataset = BenchmarkDIENDataset


_register_dien_dataset()
