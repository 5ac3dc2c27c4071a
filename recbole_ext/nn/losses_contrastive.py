"""DuoRec/FEARec regularisers on augmented views of the user representation.

Views of one training batch (FEARec Eq. 23–26, DuoRec §3.3), each [B, D]:

* ``main``: the representation of the main pass (the one the recommendation loss uses);
* ``dropout``: a second pass over the same sequences — another dropout mask, DuoRec's
  "unsupervised augmentation" h'_u;
* ``positive``: a pass over another training sequence with the same target item, DuoRec's
  "supervised augmentation" h'_{u,s} (drawn by ``models/same_target.py``; the sample itself when
  no other has that target).

A pair names two of them: ``dropout_positive`` is RecBole/DuoRec's ``contrast: us_x`` (the
paper's), ``main_dropout`` is ``un``, ``main_positive`` is ``su``. Both losses below read the
same views, so a batch pays for each pass once whichever losses are on.

CL4SRec's views are data-level instead: two random augmentations (crop, mask, reorder;
``nn/sequence_augmentation.py``) of each training sequence (``augmented_contrastive``).
"""
from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.nn.context import EncoderOutput
from recbole_ext.nn.losses import AUX_LOSS, AuxLoss
from recbole_ext.nn.sequence_augmentation import OPERATIONS, SIMILARITY_OPERATIONS, Operation, augment

Pair = Literal["dropout_positive", "main_dropout", "main_positive"]
VIEW_RECORD = "same_target_views"  # key in the main pass's records: {view name: [B, D]}


def info_nce(first: torch.Tensor, second: torch.Tensor, temperature: float, similarity: str) -> torch.Tensor:
    """NT-Xent over 2B views (FEARec Eq. 23, DuoRec Eq. 9, as their code computes it).

    Row r's positive is its partner (r ± B); every other row of the 2B, except r itself, is a
    negative. As in the authors' code, the positive also sits in the denominator (the paper's
    Eq. 24 leaves it out) and ``dot`` similarity is not normalised.
    """
    views = torch.cat((first, second))
    if similarity == "cos":
        views = F.normalize(views, dim=-1)
    logits = views @ views.T / temperature
    logits = logits.masked_fill(torch.eye(len(views), dtype=torch.bool, device=views.device), float("-inf"))
    batch = len(first)
    partner = torch.arange(2 * batch, device=views.device).roll(batch)
    return F.cross_entropy(logits, partner)


class ViewLoss(AuxLoss):
    exact_under_trailing_trim = True  # views are states at the last real position
    reads_every_final_state = False  # the main view is the backbone's own read (output.at)
    compares_user_representations = True
    """A loss on two views; owns (or shares with a sibling loss) the same-target sampler."""

    @dataclass(frozen=True)
    class Options:
        pair: Pair = "dropout_positive"

    def __init__(self, options, model: nn.Module):
        super().__init__(options, model)
        self.sampler = None

    def bind_dataset(self, model, dataset) -> None:
        if "positive" not in self.options.pair:
            return
        for other in getattr(model, "aux_losses", ()):  # one sampler per model, however many losses use it
            if isinstance(other, ViewLoss) and other.sampler is not None:
                self.sampler = other.sampler
                return
        # models/ knows RecBole's dataset; imported here so nn/ stays free of RecBole at import time.
        from recbole_ext.models.same_target import SameTargetSampler

        self.sampler = SameTargetSampler.from_dataset(dataset, model)

    def views(self, model, interaction, output: EncoderOutput) -> tuple[torch.Tensor, torch.Tensor]:
        first, second = self.options.pair.split("_")
        return view(first, model, interaction, output, self.sampler), view(second, model, interaction, output, self.sampler)


def view(name: str, model, interaction, output: EncoderOutput, sampler) -> torch.Tensor:
    """One view of the batch, computed at most once per main pass (cached in its records)."""
    cache = output.records.setdefault(VIEW_RECORD, {})
    if name not in cache:
        if name == "main":  # the backbone's state at the last real position, from the main pass
            cache[name] = output.at(interaction[model.ITEM_SEQ_LEN] - 1)
        elif name == "dropout":
            cache[name] = model.backbone.user_representation(model, interaction)
        else:
            if sampler is None:
                raise RuntimeError("the positive view needs the same-target sampler: bind_dataset was not called")
            positive = model.trimmed(sampler.positive_batch(model, interaction))
            cache[name] = model.backbone.user_representation(model, positive)
    return cache[name]


@AUX_LOSS.register("same_target_contrastive")
class SameTargetContrastive(ViewLoss):
    """InfoNCE between two views (DuoRec's contrastive regularisation, FEARec's CReg, Eq. 23–25)."""

    @dataclass(frozen=True)
    class Options(ViewLoss.Options):
        temperature: float = 1.0  # τ (RecBole/authors' ``tau``; their scripts use 1)
        similarity: Literal["dot", "cos"] = "dot"  # RecBole/authors' ``sim``

        def validate(self):
            if self.temperature <= 0:
                return f"temperature must be > 0, got {self.temperature}"
            return None

    def forward(self, model, interaction, output: EncoderOutput) -> torch.Tensor:
        first, second = self.views(model, interaction, output)
        return info_nce(first, second, self.options.temperature, self.options.similarity)


@AUX_LOSS.register("frequency_regularizer")
class FrequencyRegularizer(ViewLoss):
    """mean |rfft(a) − rfft(b)| over the hidden dimension of two views (FEARec Eq. 26, "FReg").

    The FFT runs over the D features of each final representation (orthonormal), not over time,
    and the modulus is averaged over the B·(D/2+1) bins, as the authors' code does.
    """

    def forward(self, model, interaction, output: EncoderOutput) -> torch.Tensor:
        first, second = self.views(model, interaction, output)
        # rfft is linear: one transform of the difference.
        return torch.fft.rfft((first - second).float(), dim=-1, norm="ortho").abs().mean()


@AUX_LOSS.register("augmented_contrastive")
class AugmentedViewsContrastive(AuxLoss):
    """CL4SRec's contrastive task (Xie et al., ICDE 2022): InfoNCE between two random augmentations
    of each training sequence, each encoded like a user and read at its last real position. With
    ``substitute``/``insert`` among the operations it is CoSeRec's (Liu et al., 2021), whose
    neighbour table is ItemCF-IUF over the training data, switched to the hybrid of ItemCF-IUF and
    the model's own item embeddings after ``hybrid_after_epoch`` epochs (``models/item_similarity.py``).

    The negatives are the other 2B − 2 views of the batch (NT-Xent, :func:`info_nce`). The [MASK]
    token is item-embedding row ``n_items``, the row BERT4Rec's cloze token uses (CoSeRec's code
    masks with the padding id 0 instead). ``view: sequence`` compares the states of every position,
    aligned at the latest item and flattened, as CoSeRec's code does (its padded positions count
    there; ours are zeros).
    """

    exact_under_trailing_trim = True  # views are drawn at the full length and encoded on their own
    reads_every_final_state = False  # it never reads the main pass
    compares_user_representations = True
    works_on_windows = True  # each row's sequence is augmented, a prefix or a user's window alike (CoSeRec's)

    @dataclass(frozen=True)
    class Options:
        operations: list[Operation] = OPERATIONS  # each view draws one per sequence, uniformly
        crop_ratio: float = 0.2  # η: share of the items a crop keeps
        mask_ratio: float = 0.7  # γ: share of the items masked
        reorder_ratio: float = 0.2  # β: share of the items in the shuffled run
        substitute_ratio: float = 0.1  # α: share of the items substituted (at least one)
        insert_ratio: float = 0.4  # ρ: share of the items that get a similar item inserted before them (at least one)
        short_length: int = 0  # sequences of at most this many items draw from short_operations (CoSeRec's augment_threshold; 0: off)
        short_operations: list[Operation] = ("insert", "substitute", "mask")  # CoSeRec's "SIM"
        hybrid_after_epoch: int | None = None  # after this epoch, neighbours from ItemCF-IUF and the item embeddings (CoSeRec: 160)
        view: Literal["last", "sequence"] = "last"  # last: the state that scores items (CL4SRec); sequence: every state (CoSeRec)
        temperature: float = 1.0  # τ
        similarity: Literal["dot", "cos"] = "dot"

        def validate(self):
            for name in ("operations", "short_operations"):
                if not getattr(self, name):
                    return f"{name} must name at least one of {', '.join(typing.get_args(Operation))}"
                if len(set(getattr(self, name))) != len(getattr(self, name)):
                    return f"{name} must not repeat, got {list(getattr(self, name))}"
            for name in ("crop_ratio", "mask_ratio", "reorder_ratio", "substitute_ratio", "insert_ratio"):
                if not 0.0 <= getattr(self, name) <= 1.0:
                    return f"{name} must be in [0, 1], got {getattr(self, name)}"
            if self.short_length < 0:
                return f"short_length must be >= 0, got {self.short_length}"
            if self.hybrid_after_epoch is not None and self.hybrid_after_epoch < 0:
                return f"hybrid_after_epoch must be >= 0 or null, got {self.hybrid_after_epoch}"
            if self.temperature <= 0:
                return f"temperature must be > 0, got {self.temperature}"
            return None

        def used_operations(self) -> tuple[Operation, ...]:
            return (*self.operations, *(self.short_operations if self.short_length > 0 else ()))

    @classmethod
    def extra_tokens(cls, options) -> int:
        return 1 if "mask" in options.used_operations() else 0

    def __init__(self, options, model: nn.Module):
        super().__init__(options, model)
        if not model.backbone.takes_augmented_sequences:
            raise ConfigError(f"aux loss 'augmented_contrastive' cannot augment the sequences of backbone "
                              f"{type(model.backbone).__name__}: it reads more per position than item ids "
                              "(use backbone sasrec, bert4rec or core)")
        if options.view == "sequence" and not hasattr(model.backbone, "encode_positions"):
            raise ConfigError(f"aux loss 'augmented_contrastive': view 'sequence' reads the states of every position, "
                              f"which backbone {type(model.backbone).__name__} does not give (use view: last)")
        self.ratios = {"crop": options.crop_ratio, "mask": options.mask_ratio, "reorder": options.reorder_ratio,
                       "substitute": options.substitute_ratio, "insert": options.insert_ratio}
        self.uses_neighbours = any(op in SIMILARITY_OPERATIONS for op in options.used_operations())
        self.offline_neighbours = None
        # Data, rebuilt at every build (and the hybrid at every epoch): not state to save.
        self.register_buffer("neighbours", torch.zeros(0, dtype=torch.long), persistent=False)

    def bind_dataset(self, model, dataset) -> None:
        if not self.uses_neighbours:
            return
        # models/ knows RecBole's dataset; imported here so nn/ stays free of RecBole at import time.
        from recbole_ext.models.item_similarity import itemcf_iuf_of_dataset

        self.offline_neighbours = itemcf_iuf_of_dataset(dataset, model.n_items)
        self.neighbours = self.offline_neighbours[0].to(self.neighbours.device)

    def start_training_epoch(self, model, epoch: int) -> None:
        """CoSeRec's warm-up: after ``hybrid_after_epoch`` epochs the neighbours mix in the model's
        item embeddings, recomputed at the start of every later epoch."""
        after = self.options.hybrid_after_epoch
        if not self.uses_neighbours or after is None or epoch <= after or self.offline_neighbours is None:
            return
        from recbole_ext.models.item_similarity import embedding_neighbours, hybrid

        online = embedding_neighbours(model.item_embedding.weight.detach(), model.n_items)
        self.neighbours = hybrid(self.offline_neighbours, online)

    def view_of(self, model, batch) -> torch.Tensor:
        if self.options.view == "last":
            return model.backbone.user_representation(model, batch)
        states, _ = model.backbone.encode_positions(model, batch, None)  # [B, W, D], left-aligned
        lengths = batch[model.ITEM_SEQ_LEN]
        full = model.max_seq_length
        # Right-aligned at the full length, padding zero: views of any width compare position by recency.
        source = torch.arange(full, device=states.device)[None, :] - (full - lengths)[:, None]
        real = source >= 0
        states = F.pad(states, (0, 0, 0, full - states.size(1)))  # a trimmed batch is narrower
        aligned = states.gather(1, source.clamp(min=0)[:, :, None].expand(-1, -1, states.size(-1)))
        return (aligned * real[:, :, None].to(aligned.dtype)).flatten(1)

    def forward(self, model, interaction, output: EncoderOutput) -> torch.Tensor:
        views = []
        for _ in range(2):
            item_seq, lengths = augment(interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN],
                                        self.options.operations, self.ratios, model.n_items, model.max_seq_length,
                                        similar=self.neighbours if self.uses_neighbours else None,
                                        short_length=self.options.short_length,
                                        short_operations=self.options.short_operations)
            batch = model.trimmed({model.ITEM_SEQ: item_seq, model.ITEM_SEQ_LEN: lengths})
            views.append(self.view_of(model, batch))
        return info_nce(*views, self.options.temperature, self.options.similarity)
