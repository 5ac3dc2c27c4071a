"""Feature-aware next-item backbones: SASRecF and FDSA, sharing one item-feature embedding.

Both read item side information (the ``.item`` file) named by ``selected_features`` (RecBole's key;
default ``['class']``, ml-100k's genres) with ``token`` or ``token_seq`` fields; a ``token_seq`` field
(e.g. several genres) is pooled over its tokens by ``pooling_mode`` (``mean``, ``sum``, ``max``, as
RecBole's ``FeatureSeqEmbLayer``: mean = masked sum / (count + 1e-8)). The fields are embedded in
RecBole's order, ``token`` fields first, then ``token_seq`` fields (each group in the order listed).
The dataset must load them: ``load_col: {item: [item_id, class]}``; the item id itself may be
selected as its own feature (``selected_features: [item_id]``, as the LinRec authors did on Gowalla).
Float features are not supported. Both backbones predict, as RecBole's, against the plain item
embeddings (tied with the input item table), trained like SASRec (CE over all items or BPR).

``sasrecf``: SASRecF (RecBole's feature extension of SASRec, Kang & McAuley 2018)::

    x_t = W [e_{s_t} ; f_{s_t,1} ; ... ; f_{s_t,F}] + b        (RecBole's ``concat_layer``)

the fused vector replaces the item embedding at the encoder input (the ``embed_items`` hook), so
the configured position part, input norm/dropout and attention act on it; the state at the last real
position is the user. RecBole's SASRecF defaults ``pooling_mode: sum``.

``fdsa``: FDSA (Zhang et al., IJCAI 2019, "Feature-level Deeper Self-Attention Network for
Sequential Recommendation"). Two self-attention streams over the same positions:

* item stream: the item embeddings through the model's position part and encoder (configured
  attention and position parts);
* feature stream: per position, vanilla attention pools the F feature vectors (paper Eq. 3-4,
  ``a = softmax_j(w₂ᵀ ReLU(W₁ f_j + b₁) + b₂)``, ``f = Σ_j a_j f_j``), then the same position part,
  input norm and dropout, and a second encoder, ``feature_attention`` (default: the configured
  attention type, with its own weights). Both EulerFormer and LinRec replace the attention of
  *both* FDSA encoders (their specs, §1.7), and RecBole shares the position table and layer norm
  between the streams, so the feature stream shares the position part (EulerFormer shares ψ too).
  Both streams run in one ``AttentionContext``: what parts record (``attention_probs``,
  ``layer_outputs``) lists the item stream's layers, then the feature stream's, so an auxiliary
  loss summed over records covers both encoders, as the EulerFormer authors' FDSA does;
* output (paper Eq. 11): ``o = Dropout(LN(W [o_item ; o_feature] + b))`` at the last real position.
  As in RecBole, ``LN`` and ``Dropout`` are the *input* layer norm and dropout (one shared module).
  RecBole's FDSA defaults ``pooling_mode: mean``.

Differences from RecBole: in training, the feature stream's input dropout is drawn after the item
encoder ran (RecBole draws both input dropouts first), so training runs are RecBole's only in
distribution, not bit for bit with ``dropout_impl: torch``; evaluation matches to 1e-5
(``tests/models/test_backbone_features.py``). Config errors (a missing feature, a float feature)
are one-line ``ConfigError``s naming ``selected_features``/``load_col`` instead of RecBole's
``KeyError``/shape errors.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from recbole.utils import FeatureType
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.models.backbones import BACKBONE, CausalNextItem
from recbole_ext.nn import ATTENTION, TransformerEncoder, parse_part_spec

TOKEN_SEQ_MEAN_EPS = 1e-8  # RecBole's: an item without tokens pools to 0, not NaN
MAX_POOL_FILL = 1e9  # RecBole's max pooling subtracts this at padded tokens


class ItemFeatureEmbedding(nn.Module):
    """Item ids [B, L] → one vector per selected feature field [B, L, F, D] (RecBole's
    ``FeatureSeqEmbLayer`` for item token and token_seq fields). The per-item feature ids are
    buffers, so the lookup runs on the model's device."""

    def __init__(self, dataset, fields: list[str], size: int, pooling_mode: str):
        super().__init__()
        features = dataset.get_item_feature()
        available = list(features.interaction)
        kinds = {}
        for field in fields:
            if field not in available:
                raise ConfigError(
                    f"selected_features: {field!r} is not an item feature of dataset {dataset.dataset_name} "
                    f"(loaded: {', '.join(available)}); add it to load_col, e.g. load_col: {{item: [item_id, {field}]}}")
            kinds[field] = dataset.field2type[field]
            if kinds[field] not in (FeatureType.TOKEN, FeatureType.TOKEN_SEQ):
                raise ConfigError(f"selected_features: {field!r} is a {kinds[field].value} field; "
                                  "only token and token_seq item features are supported")
        self.token_fields = [f for f in fields if kinds[f] == FeatureType.TOKEN]
        self.token_seq_fields = [f for f in fields if kinds[f] == FeatureType.TOKEN_SEQ]
        self.fields = self.token_fields + self.token_seq_fields  # RecBole's order
        self.pooling_mode = pooling_mode
        self.tables = nn.ModuleDict({field: nn.Embedding(dataset.num(field), size) for field in self.fields})
        for index, field in enumerate(self.fields):
            self.register_buffer(f"ids_{index}", features[field].long(), persistent=False)

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        vectors = []
        for index, field in enumerate(self.fields):
            ids = getattr(self, f"ids_{index}")[item_seq]  # [B, L] or [B, L, S]
            embedded = self.tables[field](ids)
            vectors.append(embedded if field in self.token_fields else self.pool(embedded, ids != 0))
        return torch.stack(vectors, dim=-2)

    def pool(self, embedded: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """[..., S, D] token vectors, [..., S] real-token mask → [..., D]."""
        real = real[..., None].to(embedded.dtype)
        if self.pooling_mode == "max":
            return (embedded - (1 - real) * MAX_POOL_FILL).max(dim=-2).values
        total = (embedded * real).sum(dim=-2)
        if self.pooling_mode == "sum":
            return total
        return total / (real.sum(dim=-2) + TOKEN_SEQ_MEAN_EPS)

    @property
    def table_sizes(self) -> list[int]:
        return [self.tables[field].num_embeddings for field in self.fields]


def _value(values, key: str):
    return values[key] if key in values else None


class FeatureBackbone(CausalNextItem):
    """Shared by SASRecF and FDSA: the flat RecBole keys and the item-feature embedding."""

    takes_augmented_sequences = False  # item features are looked up per id: a [MASK] id has none

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        self.selected_features = list(self.setting(config, "selected_features"))
        self.pooling_mode = self.setting(config, "pooling_mode")
        self.hidden_size = model.dims.hidden_size

    @classmethod
    def check_config(cls, values):
        features = cls.setting(values, "selected_features")
        if not features:
            yield "selected_features", "feature backbones need at least one item feature field"
            return
        load_col = _value(values, "load_col")
        if isinstance(load_col, dict):  # null/absent: RecBole loads every column, checked on the dataset
            item_id = _value(values, "ITEM_ID_FIELD") or "item_id"
            loaded = set(load_col.get("item") or ()) | {item_id}
            missing = [field for field in features if field not in loaded]
            if missing:
                yield "selected_features", (
                    f"{missing} must be loaded from the .item file: add load_col: {{item: [{item_id}, "
                    f"{', '.join(missing)}]}} (load_col.item now: {load_col.get('item')})")

    def bind_dataset(self, model, dataset):
        self.features = ItemFeatureEmbedding(dataset, self.selected_features, self.hidden_size, self.pooling_mode)


@BACKBONE.register("sasrecf")
class FeatureFusedNextItem(FeatureBackbone):
    """SASRecF: item and feature embeddings fused by a linear layer at the encoder input."""

    flat_defaults = {"selected_features": ["class"], "pooling_mode": "sum"}  # RecBole's SASRecF.yaml

    def bind_dataset(self, model, dataset):
        super().bind_dataset(model, dataset)
        self.input_fusion = nn.Linear(self.hidden_size * (1 + len(self.features.fields)), self.hidden_size)

    def embed_items(self, model, item_seq, context):
        fused = torch.cat([model.item_embedding(item_seq), self.features(item_seq).flatten(-2)], dim=-1)
        return self.input_fusion(fused)


@BACKBONE.register("fdsa")
class FeatureStreamNextItem(FeatureBackbone):
    """FDSA: an item self-attention stream and a feature self-attention stream, joined at the end."""

    flat_defaults = {"selected_features": ["class"], "pooling_mode": "mean"}  # RecBole's FDSA.yaml

    @dataclass(frozen=True)
    class Options:
        # The feature stream's attention part (a name or {type: ..., options}); null = the configured `attention`.
        feature_attention: str | dict | None = None

        def validate(self):
            if self.feature_attention is not None:
                try:
                    parse_part_spec(ATTENTION, self.feature_attention, "feature_attention")
                except ConfigError as error:
                    return str(error)

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        attention = options.feature_attention if options.feature_attention is not None else config["attention"]
        self.feature_encoder = TransformerEncoder(model.dims, parse_part_spec(ATTENTION, attention, "feature_attention"))
        size = model.dims.hidden_size
        # Vanilla attention over a position's feature vectors (RecBole's VanillaAttention layout).
        self.feature_pooling = nn.Sequential(nn.Linear(size, size), nn.ReLU(), nn.Linear(size, 1))
        self.output_fusion = nn.Linear(2 * size, size)

    def pool_features(self, feature_vectors: torch.Tensor) -> torch.Tensor:
        """[B, L, F, D] → [B, L, D] (paper Eq. 3-4)."""
        weights = torch.softmax(self.feature_pooling(feature_vectors).squeeze(-1), dim=-1)
        return torch.einsum("blf,blfd->bld", weights, feature_vectors)

    def encode_positions(self, model, interaction, positions):
        item_seq = interaction[model.ITEM_SEQ]
        item_output = model.encode(item_seq, causal=True, reads=positions)
        feature_input = self.pool_features(self.features(item_seq))
        # The feature encoder shares the item pass's context, and so its read positions.
        feature_output = model.encode_embedded(feature_input, item_output.context, encoder=self.feature_encoder)
        if positions is None:
            joint = torch.cat([item_output.hidden, feature_output.hidden], dim=-1)
        else:
            joint = torch.cat([item_output.at(positions), feature_output.at(positions)], dim=-1)
        return model.input_dropout(model.input_norm(self.output_fusion(joint))), item_output


# RecBole names of the feature backbones' own layers → ours (the encoders map as SASRec's).
_LAYER_RENAMES = {
    "SASRecF": {"concat_layer.": "backbone.input_fusion."},
    "FDSA": {"concat_layer.": "backbone.output_fusion.", "feature_att_layer.projection.": "backbone.feature_pooling.",
             "item_trm_encoder.": "trm_encoder."},
}


def state_dict_from_recbole_features(state_dict: dict[str, torch.Tensor], model_name: str,
                                     features: ItemFeatureEmbedding) -> dict[str, torch.Tensor]:
    """RecBole ``SASRecF``/``FDSA`` state dict → SeqTransformer's with backbone ``sasrecf``/``fdsa``.

    ``features``: our model's ``backbone.features`` (RecBole keeps all token fields in one table,
    which is split here by the field sizes)."""
    from recbole_ext.models.recbole_import import state_dict_from_recbole

    if model_name not in _LAYER_RENAMES:
        raise ValueError(f"can map {', '.join(_LAYER_RENAMES)} weights, not {model_name!r}")
    mapped, rest, feature_encoder = {}, {}, {}
    prefix = "feature_embed_layer."
    for name, tensor in state_dict.items():
        if name == prefix + "token_embedding_table.item.embedding.weight":
            sizes = features.table_sizes[: len(features.token_fields)]
            for field, table in zip(features.token_fields, tensor.split(sizes)):
                mapped[f"backbone.features.tables.{field}.weight"] = table
        elif name.startswith(prefix + "token_seq_embedding_table.item."):
            index = int(name.split(".")[3])
            mapped[f"backbone.features.tables.{features.token_seq_fields[index]}.weight"] = tensor
        elif name.startswith("feature_trm_encoder."):
            feature_encoder[name.replace("feature_trm_encoder.", "trm_encoder.", 1)] = tensor
        else:
            for old, new in _LAYER_RENAMES[model_name].items():
                if name.startswith(old):
                    name = new + name[len(old):]
                    break
            if name.startswith("backbone."):
                mapped[name] = tensor
            else:
                rest[name] = tensor
    mapped.update(state_dict_from_recbole(rest, "SASRec"))
    for name, tensor in state_dict_from_recbole(feature_encoder, "SASRec").items():
        mapped[name.replace("encoder.", "backbone.feature_encoder.", 1)] = tensor
    return mapped
