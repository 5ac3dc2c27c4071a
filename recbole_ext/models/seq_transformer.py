"""``SeqTransformer``: the one composable transformer every paper model is a preset of.

Slots (YAML keys): ``backbone`` (:mod:`recbole_ext.models.backbones`), ``attention`` and
``position`` (:mod:`recbole_ext.nn`), ``aux_losses``. With the defaults it is RecBole's SASRec,
numerically (``tests/models/test_recbole_parity.py``); with ``backbone: bert4rec`` and
``hidden_dropout_prob``/``attn_dropout_prob`` 0.2 it is RecBole's BERT4Rec, fine-tuning batches
(``ft_ratio`` 0.5, RecBole's BERT4Rec.yaml) included.

RecBole's contract: ``calculate_loss`` returns the main loss, or a tuple ``(main, aux...)`` whose
names are ``loss_names`` (RecBole's trainer sums a tuple; ours also logs each term by name).

A paper model is a preset: a subclass that only names its default YAML, which ``extends`` this
model's defaults and picks parts (registered under ``recbole_ext.models`` in setup.cfg)::

    class MyPaperModel(SeqTransformer):
        DEFAULT_CONFIG = PROPERTIES / "MyPaperModel.yaml"   # extends: SeqTransformer.yaml
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from recbole.model.abstract_recommender import SequentialRecommender
from recbole.utils import InputType
from torch import nn

from recbole_ext.config.schema import Key, in_range
from recbole_ext.models.backbones import BACKBONE, setting_or_none
from recbole_ext.models.repeated_rows import candidate_fields, consecutive_repeats
from recbole_ext.models.trimming import declared_exact, trim_batch
from recbole_ext.models.window_targets import HistoryExcludingNegatives
from recbole_ext.nn import ATTENTION, AUX_LOSS, POSITION, AttentionContext, EncoderOutput, TransformerDims
from recbole_ext.nn.context import MainPassReplay, on_packed_rows, packed_row_index
from recbole_ext.nn import TransformerEncoder, parse_aux_losses, parse_part_spec
from recbole_ext.nn.dropout import Dropout
from recbole_ext.nn.transformer import ACTIVATIONS

PROPERTIES = Path(__file__).parent / "properties"
probability = in_range(0.0, 1.0, high_open=True)
positive = in_range(1)


class SeqTransformer(SequentialRecommender):
    DEFAULT_CONFIG = PROPERTIES / "SeqTransformer.yaml"
    # RecBole derives the training input type from loss_type but knows only CE/BPR. Pairwise rows
    # carry the one sampled negative BPR and BCE need; CE turns sampling off (config resolver), where
    # the input type has no effect.
    input_type = InputType.PAIRWISE
    CONFIG_SCHEMA = {
        "backbone": Key(str | dict, "backbone part", parse=lambda v, w: parse_part_spec(BACKBONE, v, w)),
        "attention": Key(str | dict, "attention part", parse=lambda v, w: parse_part_spec(ATTENTION, v, w)),
        "position": Key(str | dict, "position part", parse=lambda v, w: parse_part_spec(POSITION, v, w)),
        "aux_losses": Key(list | None, "auxiliary loss terms", parse=parse_aux_losses),
        "n_layers": Key(int, "transformer blocks", positive),
        "n_heads": Key(int, "attention heads", positive),
        "hidden_size": Key(int, "model width", positive),
        "inner_size": Key(int, "feed-forward width", positive),
        "hidden_dropout_prob": Key(float, "dropout on embeddings and block outputs", probability),
        "attn_dropout_prob": Key(float, "dropout on attention probabilities", probability),
        "hidden_act": Key(Literal[tuple(ACTIVATIONS)], "feed-forward activation"),
        "layer_norm_eps": Key(float, "layer norm epsilon", in_range(0.0, low_open=True)),
        "initializer_range": Key(float, "std of the normal weight init", in_range(0.0, low_open=True)),
        "loss_type": Key(Literal["CE", "BPR", "BCE", "InfoNCE"], "main loss (BCE: one sampled negative, as SASRec's "
                         "paper; InfoNCE: HLLM's cosine softmax over nce_negatives shared negatives, next-item backbones)"),
        "nce_negatives": Key(int, "loss_type InfoNCE: uniform negatives drawn per batch, shared by its rows (HLLM: 512)",
                             positive),
        "nce_threshold": Key(float, "loss_type InfoNCE: a negative whose cosine with the target exceeds this is "
                                    "left out (HLLM's nce_thres 0.99)", in_range(-1.0, 1.0)),
        "block_layout": Key(Literal["post_ln", "pre_ln"], "post_ln: RecBole's blocks, LN(x + sublayer(x)); pre_ln: "
                                                         "x + sublayer(LN(x)) and one LN after the last block, as "
                                                         "SASRec's own code (nn/transformer.py)"),
        "dropout_impl": Key(Literal["fast", "torch"], "dropout random stream (nn/dropout.py); torch: RecBole's, "
                                                       "so training batches are neither trimmed nor packed"),
        "trim_padding": Key(bool, "cut each batch's trailing padding where every part declares it exact "
                                  "(models/trimming.py)"),
        "pack_tokens": Key(bool, "run the token-wise layers (Q/K/V and output projections, residuals, norms, "
                                 "dropout, feed-forward) on real tokens only, where every part declares trimming "
                                 "exact (nn/transformer.py)"),
        "prune_unread_states": Key(bool, "run the last block's residuals, norms, dropout and feed-forward only at the "
                                         "positions the loss and scores read (same outputs and random stream; "
                                         "nn/transformer.py)"),
        "training_samples": Key(Literal["prefixes", "windows"], "prefixes: RecBole's, one target per training "
                                "interaction; windows: SASRec code's, one row per user whose every position is a "
                                "target (models/window_targets.py)"),
        "mask_ratio": Key(float, "bert4rec backbone: masked share", in_range(0.0, 1.0, low_open=True, high_open=True)),
        "ft_ratio": Key(float | None, "bert4rec backbone on prefixes: share of training batches that mask only each "
                                      "row's last item (default 0.5, RecBole's BERT4Rec; models/backbones.py Cloze)",
                        in_range(0.0, 1.0)),
        # Backbone settings under RecBole's flat names, so its CORE/SASRecF/FDSA configs carry over;
        # null (the default) = that backbone's RecBole default (see its ``flat_defaults``).
        "selected_features": Key(list[str] | None, "sasrecf/fdsa: item feature fields (default ['class'])"),
        "pooling_mode": Key(Literal["mean", "max", "sum"] | None, "sasrecf/fdsa: token_seq pooling (sum/mean)"),
        "temperature": Key(float | None, "core: cosine-logit temperature (default 0.07)", in_range(0.0, low_open=True)),
        "sess_dropout": Key(float | None, "core: dropout on session item embeddings (default 0.2)", probability),
        "item_dropout": Key(float | None, "core: dropout on candidate item embeddings (default 0.2)", probability),
    }

    @staticmethod
    def check_config(values: dict[str, Any]):
        if values["hidden_size"] % values["n_heads"]:
            yield "hidden_size", f"{values['hidden_size']} is not a multiple of n_heads ({values['n_heads']})"
        backbone = parse_part_spec(BACKBONE, values["backbone"], "backbone")
        yield from BACKBONE.get(backbone.name).check_config(values)
        if setting_or_none(values, "ft_ratio") is not None and BACKBONE.get(backbone.name).fine_tuning_ratio is None:
            yield "ft_ratio", f"is read by the bert4rec backbone's training on prefixes, not by backbone {backbone.name!r}"
        if values["loss_type"] == "InfoNCE" and not BACKBONE.get(backbone.name).takes_info_nce:
            yield "loss_type", f"InfoNCE trains next-item backbones (HLLM's SASRec), not {backbone.name!r}"
        if not BACKBONE.get(backbone.name).represents_users_by_state:
            for spec in parse_aux_losses(values["aux_losses"], "aux_losses"):
                if AUX_LOSS.get(spec.part.name).compares_user_representations:
                    yield "aux_losses", (f"aux loss {spec.part.name!r} compares user representations as encoder states; "
                                         f"backbone {backbone.name!r} represents users otherwise (its scores read a user embedding)")
        if values["training_samples"] == "windows":
            if not BACKBONE.get(backbone.name).trains_on_windows:
                yield "training_samples", f"windows need a next-item or cloze backbone, not {backbone.name!r} (use prefixes)"
            for spec in parse_aux_losses(values["aux_losses"], "aux_losses"):
                if not AUX_LOSS.get(spec.part.name).works_on_windows:
                    yield "training_samples", (f"aux loss {spec.part.name!r} reads one target per training row: "
                                               f"it needs training_samples: prefixes")

    @staticmethod
    def derived_recbole_config(values: dict[str, Any]) -> dict[str, Any]:
        backbone = parse_part_spec(BACKBONE, values["backbone"], "backbone")
        return BACKBONE.get(backbone.name).derived_recbole_config(values)

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.n_users = dataset.num(self.USER_ID)  # backbones with user embeddings (SSE-PT) size them by it
        # Sampled evaluation's rows carry the label and the candidate's item features (predict ignores them).
        self.candidate_fields = candidate_fields(dataset, config)
        self.loss_type = config["loss_type"]
        self.initializer_range = config["initializer_range"]
        self.dims = TransformerDims.from_config(config, self.max_seq_length)
        for name, problem in self.check_config(config):
            raise ValueError(f"{name}: {problem}")

        self.backbone = BACKBONE.build(parse_part_spec(BACKBONE, config["backbone"], "backbone"), self, config)
        self.aux_specs = parse_aux_losses(config["aux_losses"], "aux_losses")
        # One [MASK] row (n_items) serves every part that asks for it: they all mean "an item hidden here".
        extra_tokens = max([self.backbone.extra_tokens,
                            *(AUX_LOSS.get(spec.part.name).extra_tokens(spec.part.options) for spec in self.aux_specs)])
        self.item_embedding = nn.Embedding(self.n_items + extra_tokens, self.backbone.item_embedding_size(self.dims),
                                           padding_idx=0)
        self.position = POSITION.build(parse_part_spec(POSITION, config["position"], "position"), self.dims)
        self.input_norm = nn.LayerNorm(self.dims.hidden_size, eps=self.dims.layer_norm_eps)
        self.input_dropout = Dropout(self.dims.hidden_dropout_prob, self.dims.dropout_impl)
        self.encoder = TransformerEncoder(self.dims, parse_part_spec(ATTENTION, config["attention"], "attention"))

        self.aux_losses = nn.ModuleList(AUX_LOSS.build(spec.part, self) for spec in self.aux_specs)
        self.loss_names = ("main", *(spec.name for spec in self.aux_specs)) if self.aux_specs else ()
        self.wants = frozenset().union(*(loss.wants for loss in self.aux_losses))
        for part in (self.backbone, *self.aux_losses):  # parts that precompute from the training data
            if hasattr(part, "bind_dataset"):
                part.bind_dataset(self, dataset)

        self.apply(self._init_weights)
        self.backbone.reset_model_parameters(self)  # a backbone's own init scheme (CORE's uniform one)
        for module in self.modules():  # parts with their own init (e.g. zero-initialised tables)
            if module is not self and hasattr(module, "reset_part_parameters"):
                module.reset_part_parameters()
        exact = declared_exact(self)
        self.trims_padding = bool(config["trim_padding"]) and exact
        # The same declaration covers packing: outputs at real positions never read padded ones.
        self.packs_tokens = bool(config["pack_tokens"]) and exact
        # ``dropout_impl: torch`` promises RecBole's random stream, which draws every training mask at
        # the batch's full [B, L] shape: trimmed or packed training batches would draw other masks.
        # Evaluation has no dropout, so it still trims and packs.
        self.reshapes_training_batches = self.dims.dropout_impl != "torch"
        # Every consumer of the last block's states must read them only where the backbone said it
        # would (``encode(..., reads=...)``): in training, auxiliary losses that read other positions,
        # or records of every layer's states, keep the last block whole. Evaluation runs no auxiliary
        # loss, so it prunes whenever ``prune_unread_states`` is on (``prunes_training_states``).
        self.prunes_unread_states = bool(config["prune_unread_states"])
        self.aux_losses_read_every_state = "layer_outputs" in self.wants or \
            any(loss.reads_every_final_state for loss in self.aux_losses)
        self.list_suffix = config["LIST_SUFFIX"]
        self.trains_on_windows = config["training_samples"] == "windows"
        if self.trains_on_windows and self.loss_type in ("BPR", "BCE"):
            self.window_negatives = HistoryExcludingNegatives.from_training_rows(dataset, self.n_items)

    def _init_weights(self, module: nn.Module) -> None:
        """RecBole's init: N(0, initializer_range) weights, zero biases, unit layer norms."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=self.initializer_range)
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()

    def encode(self, item_seq: torch.Tensor, causal: bool, reads: torch.Tensor | None = None,
               **inputs: torch.Tensor) -> EncoderOutput:
        """Item ids [B, L] (0 = padding) → per-position states [B, L, D]; read them with ``output.at``.

        ``reads``: the only positions ([B] or [B, M] per row, real ones) whose states the caller
        and the auxiliary losses will read, so the last block may skip the others (``prune_unread_states``).
        ``inputs``: extra tensors for parts (``AttentionContext.inputs``), e.g. timestamps.
        """
        context = self.attention_context(item_seq, causal, reads, **inputs)
        return self.encode_embedded(self.backbone.embed_items(self, item_seq, context), context)

    @property
    def prunes_training_states(self) -> bool:
        """Whether training passes run the last block at the read positions only."""
        return self.prunes_unread_states and self.reshapes_training_batches and not self.aux_losses_read_every_state

    def attention_context(self, item_seq: torch.Tensor, causal: bool, reads: torch.Tensor | None = None,
                          **inputs: torch.Tensor) -> AttentionContext:
        reshapes = self.reshapes_training_batches or not self.training
        prunes = self.prunes_training_states if self.training else self.prunes_unread_states
        # Records feed auxiliary losses, which run in training only: evaluation records nothing, so
        # its last block keeps the read-rows shortcut (``TransformerBlock.at_read_rows``).
        context = AttentionContext(item_seq=item_seq, causal=causal, position=self.position,
                                   wants=self.wants if self.training else frozenset(), inputs=inputs,
                                   packed_rows=packed_row_index(item_seq) if self.packs_tokens and reshapes else None)
        if reads is not None and prunes:
            context.reading(reads)
        return context

    def encode_embedded(self, embedded: torch.Tensor, context: AttentionContext,
                        encoder: nn.Module | None = None) -> EncoderOutput:
        """Input vectors [B, L, D] → states: position part, input norm and dropout, then ``encoder``
        (default: the model's). For backbones that reuse their input vectors (CORE pools them) or
        run a second stream through the same context (FDSA's feature stream)."""
        hidden = self.position.embed_input(embedded, context)
        hidden = on_packed_rows(lambda rows: self.input_dropout(self.input_norm(rows)), hidden, context.packed_rows)
        hidden = (encoder or self.encoder)(hidden, context)
        return EncoderOutput(hidden, context)

    def trimmed(self, interaction):
        """The batch cut to the columns its longest sequence needs, when that is exact for this
        model's parts (``trim_padding``; see ``models/trimming.py``), else unchanged."""
        if not self.trims_padding or (self.training and not self.reshapes_training_batches):
            return interaction
        return trim_batch(interaction, self.ITEM_SEQ_LEN, self.ITEM_SEQ, self.list_suffix, self.backbone.trailing_slots)

    def calculate_loss(self, interaction):
        interaction = self.trimmed(interaction)
        states = None
        if any(loss.replays_main_pass for loss in self.aux_losses):
            states = MainPassReplay.random_states(self.item_embedding.weight.device)
        main, output = self.backbone.training_loss(self, interaction)
        if not self.aux_losses:
            return main
        if states is not None:
            output.main_pass = MainPassReplay(main.detach(), *states)
        return (main, *(spec.weight * loss(self, interaction, output) for spec, loss in zip(self.aux_specs, self.aux_losses)))

    def training_target_count(self, interaction) -> int:
        """Targets the main loss averages over in one training batch: one per row on prefixes,
        on windows every real position (next item) or every [MASK] of the batch's last draw (cloze);
        a summed loss is the mean times this."""
        if self.trains_on_windows:
            return self.backbone.window_target_count(self, interaction)
        return len(interaction)

    def start_training_epoch(self, epoch: int) -> None:
        """Called by the trainer before each training epoch (a resumed run's first one included):
        parts with a ``start_training_epoch(model, epoch)`` method refresh what they derive from the
        model (CoSeRec's hybrid item neighbours)."""
        for module in self.modules():
            if module is not self and callable(getattr(module, "start_training_epoch", None)):
                module.start_training_epoch(self, epoch)

    def training_statistics(self) -> dict[str, dict[str, float]]:
        """Per-part diagnostics after a training epoch, by module name: every part with a
        ``training_statistics(causal)`` method (e.g. Rec-Denoiser's masks). The trainer logs them
        and keeps them in ``history.json``."""
        return {name: module.training_statistics(self.backbone.causal) for name, module in self.named_modules()
                if module is not self and callable(getattr(module, "training_statistics", None))}

    encodes_each_history_once = True  # in predict, below: the trainer leaves sampled evaluation to it

    def predict(self, interaction):
        interaction = self.trimmed(interaction)
        # Sampled evaluation repeats a row per candidate: encode each history once, unless the
        # backbone encodes the candidate with it.
        runs = None if self.backbone.encodes_candidate else consecutive_repeats(interaction, *self.candidate_fields)
        if runs is None:
            representation = self.backbone.user_representation(self, interaction)
        else:
            representation = self.backbone.user_representation(self, interaction[runs.first_rows])[runs.run_of_row]
        return self.backbone.score_items(self, representation, interaction[self.ITEM_ID])

    def full_sort_predict(self, interaction):
        return self.backbone.score_all(self, self.backbone.user_representation(self, self.trimmed(interaction)))
