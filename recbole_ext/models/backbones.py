"""The backbone slot: what the model is trained to predict and how it reads RecBole's batches.

A backbone decides the attention direction, any extra input tokens, the output head, the main
loss (CE over all items, or BPR with RecBole's sampled negative) and how users are scored.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from recbole_ext.errors import ConfigError
from recbole_ext.models.window_targets import next_item_targets
from recbole_ext.nn.context import EncoderOutput
from recbole_ext.nn.registry import Registry

BACKBONE: Registry["Backbone"] = Registry("backbone")


def setting_or_none(config, name: str):
    """Config key ``name`` or None when unset, from a values dict or a RecBole ``Config`` alike."""
    return config[name] if name in config else None


def bpr_loss(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """-log σ(s⁺ − s⁻) (Rendle et al. 2009), as RecBole's BPRLoss (gamma 1e-10)."""
    return -torch.log(1e-10 + torch.sigmoid(positive - negative)).mean()


def bce_loss(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """-log σ(s⁺) - log(1 - σ(s⁻)) with one sampled negative (SASRec, Kang & McAuley 2018, Eq. 6)."""
    return (F.softplus(-positive) + F.softplus(negative)).mean()


def sampled_cosine_info_nce(states: torch.Tensor, positive: torch.Tensor, negatives: torch.Tensor,
                            log_scale: torch.Tensor, false_negative_threshold: float) -> torch.Tensor:
    """HLLM's main loss (CAPE Table 3's SASRec; specs/cape.md §2.2): softmax cross-entropy of the
    target against one pool of sampled negatives shared by every row, on cosine similarities times
    a learned scale e^s. A negative whose cosine with the row's target exceeds
    ``false_negative_threshold`` (the target itself, or a near copy) is left out of that row.
    ``states`` [N, D], ``positive`` [N, D] and ``negatives`` [K, D] embeddings; mean over rows."""
    states, positive, negatives = (F.normalize(x, dim=-1) for x in (states, positive, negatives))
    scale = log_scale.exp()
    positive_logits = (states * positive).sum(-1, keepdim=True) * scale
    # Masked after scaling: a -inf logit times the scale would give the scale's gradient 0 · inf = NaN.
    negative_logits = ((states @ negatives.T) * scale).masked_fill(positive @ negatives.T > false_negative_threshold,
                                                                   float("-inf"))
    logits = torch.cat((positive_logits, negative_logits), dim=-1)
    return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device))


def append_after_history(item_seq: torch.Tensor, lengths: torch.Tensor, tokens: torch.Tensor,
                         max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-aligned sequences [B, L] with ``tokens`` [B] written after each last item, and their
    positions [B]. A batch narrower than ``max_length`` gains a column when some row is full; a full
    row of a ``max_length``-wide batch drops its oldest item to make room."""
    if item_seq.size(1) < max_length and bool((lengths >= item_seq.size(1)).any()):
        item_seq = F.pad(item_seq, (0, 1))
    full = lengths >= item_seq.size(1)
    shifted = torch.where(full[:, None], item_seq.roll(-1, dims=1), item_seq).clone()
    position = torch.where(full, lengths - 1, lengths)
    shifted[torch.arange(item_seq.size(0), device=item_seq.device), position] = tokens
    return shifted, position


class Backbone(nn.Module):
    """Constructed as ``Backbone(options, model, config)`` after the model's dims are set.

    A backbone that reads the encoder's states at a few positions only says which when it encodes
    (``model.encode(seq, causal, reads=positions)``) and reads them with ``output.at(positions)``:
    the last block then runs its token-wise layers there alone (``prune_unread_states``). One that
    reads every position (CORE's pooling) encodes without ``reads`` and uses ``output.hidden``.
    """

    causal = True
    extra_tokens = 0  # item-embedding rows beyond RecBole's n_items (e.g. a [MASK] token)
    # Trailing-padding trimming (models/trimming.py): whether the backbone reads only real positions
    # of left-aligned sequences (then trimming is exact), and how many positions past the longest
    # sequence it writes into (BERT4Rec's evaluation appends a [MASK]).
    exact_under_trailing_trim = False
    trailing_slots = 0
    required_recbole_config: dict = {}
    # Whether ``user_representation`` reads nothing per position but the item ids, through
    # ``model.item_embedding``: then cropped, masked or reordered sequences (CL4SRec) are valid input.
    takes_augmented_sequences = True
    # Whether ``training_loss`` can train on windows, every position a next-item target
    # (``training_samples: windows``, models/window_targets.py).
    trains_on_windows = False
    # Whether the main loss may be HLLM's sampled cosine InfoNCE (``loss_type: InfoNCE``), which
    # also makes the scores cosines: next-item backbones.
    takes_info_nce = False
    # Whether the representation of a row already reads the row's candidate item (CTR backbones),
    # so rows that differ only in the candidate cannot share one encoding (models/repeated_rows.py).
    encodes_candidate = False
    # Whether ``user_representation`` is the encoder's state at the read position ([B, hidden_size]),
    # which contrastive views compare with the main pass's state (``AuxLoss.compares_user_representations``).
    represents_users_by_state = True
    flat_defaults: dict = {}  # RecBole's defaults of the flat config keys this backbone reads (null there)
    # Cloze backbones: the default ``ft_ratio`` of RecBole's mask_itemseq transform (None: not read).
    fine_tuning_ratio: float | None = None

    def __init__(self, options, model: nn.Module, config):
        super().__init__()
        self.options = options

    @classmethod
    def setting(cls, config, name: str):
        """Flat config key ``name``, or this backbone's RecBole default when it is unset/null."""
        value = setting_or_none(config, name)
        return cls.flat_defaults[name] if value is None else value

    @classmethod
    def check_config(cls, values) -> Iterator[tuple[str, str]]:
        """(key, problem) pairs for config values this backbone cannot use, found before data loads."""
        return iter(())

    @classmethod
    def derived_recbole_config(cls, values) -> dict:
        """The RecBole keys this backbone's training needs, given the resolved config values."""
        return dict(cls.required_recbole_config)

    def item_embedding_size(self, dims) -> int:
        """Width of the model's item embeddings: the hidden size, unless the input concatenates more."""
        return dims.hidden_size

    def reset_model_parameters(self, model) -> None:
        """Re-initialise the model after RecBole's normal init and before parts' own resets."""

    def embed_items(self, model, item_seq: torch.Tensor, context) -> torch.Tensor:
        """[B, L] ids → [B, L, D] input vectors before the position part (feature backbones fuse here)."""
        return model.item_embedding(item_seq)

    def training_loss(self, model, interaction) -> tuple[torch.Tensor, EncoderOutput]:
        raise NotImplementedError

    def user_representation(self, model, interaction) -> torch.Tensor:
        """[B, D]: the state that scores candidate items for each user of the batch."""
        raise NotImplementedError

    def window_target_count(self, model, interaction) -> int:
        """Targets of a window batch's loss (``training_samples: windows``): every real position."""
        return int(interaction[model.ITEM_SEQ_LEN].sum())

    def score_items(self, model, representation: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return (representation * model.item_embedding(items)).sum(-1)

    def score_all(self, model, representation: torch.Tensor) -> torch.Tensor:
        return representation @ model.item_embedding.weight[: model.n_items].T


@BACKBONE.register("sasrec")
class CausalNextItem(Backbone):
    """SASRec (Kang & McAuley 2018): causal self-attention; the state at the last real position
    predicts the next item. Trained, as in RecBole, on the last position of every prefix, or, with
    ``training_samples: windows``, as SASRec's code, at every position of each user's latest window."""

    exact_under_trailing_trim = True
    trains_on_windows = True
    takes_info_nce = True

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        if "loss_type" in config and config["loss_type"] == "InfoNCE":
            # HLLM's temperature: e^s starts at 1/0.07 and s is kept in [0, log 100] (clamped in place)
            self.info_nce_log_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
            self.info_nce_negatives = config["nce_negatives"]
            self.info_nce_threshold = config["nce_threshold"]

    def encoder_inputs(self, model, interaction) -> dict[str, torch.Tensor]:
        """Extra tensors for parts (``AttentionContext.inputs``); e.g. TiSASRec's time intervals."""
        return {}

    def encode_positions(self, model, interaction, positions: torch.Tensor | None) -> tuple[torch.Tensor, EncoderOutput]:
        """The states that predict the next item at ``positions`` ([B] → [B, D]); None: at every
        position ([B, L, D])."""
        output = model.encode(interaction[model.ITEM_SEQ], causal=True, reads=positions,
                              **self.encoder_inputs(model, interaction))
        return (output.hidden if positions is None else output.at(positions)), output

    def encode_last(self, model, interaction) -> tuple[torch.Tensor, EncoderOutput]:
        return self.encode_positions(model, interaction, interaction[model.ITEM_SEQ_LEN] - 1)

    def training_view(self, model, interaction, targets: torch.Tensor):
        """The batch as the encoder sees it in training, and the targets ([B, L] on windows, [B] on
        prefixes): unchanged here; SSE-PT swaps some ids (models/backbone_ssept.py)."""
        return interaction, targets

    def training_loss(self, model, interaction):
        lengths = interaction[model.ITEM_SEQ_LEN]
        if model.trains_on_windows:
            targets = next_item_targets(interaction[model.ITEM_SEQ], lengths, interaction[model.POS_ITEM_ID])
        else:
            targets = interaction[model.POS_ITEM_ID]
        view, targets = self.training_view(model, interaction, targets)
        states, output = self.encode_positions(model, view, None if model.trains_on_windows else lengths - 1)
        negative = None  # drawn for the user's own history, whatever the view shows
        if model.trains_on_windows:
            real = targets > 0
            states, targets = states[real], targets[real]
            if model.loss_type in ("BPR", "BCE"):
                negative = model.window_negatives.sample(interaction[model.USER_ID][:, None].expand_as(real)[real])
        elif model.loss_type in ("BPR", "BCE"):
            negative = interaction[model.NEG_ITEM_ID]
        return self.next_item_loss(model, states, targets, negative), output

    def next_item_loss(self, model, states: torch.Tensor, positive: torch.Tensor,
                       negative: torch.Tensor | None) -> torch.Tensor:
        """The main loss, a mean over the [N, D] ``states`` against their [N] targets."""
        if model.loss_type in ("BPR", "BCE"):
            pairwise = bpr_loss if model.loss_type == "BPR" else bce_loss
            return pairwise(self.score_items(model, states, positive), self.score_items(model, states, negative))
        if model.loss_type == "InfoNCE":
            with torch.no_grad():
                self.info_nce_log_scale.clamp_(0.0, math.log(100.0))
            pool = torch.randint(1, model.n_items, (self.info_nce_negatives,), device=states.device)  # never padding
            return sampled_cosine_info_nce(states, model.item_embedding(positive), model.item_embedding(pool),
                                           self.info_nce_log_scale, self.info_nce_threshold)
        # Logits include the padding row 0, exactly as RecBole's SASRec (it is never a target), and
        # leave out a [MASK] row (CL4SRec's), which is no item (``score_all``).
        return F.cross_entropy(self.score_all(model, states), positive)

    def user_representation(self, model, interaction):
        return self.encode_last(model, interaction)[0]

    def score_items(self, model, representation, items):
        if model.loss_type == "InfoNCE":  # HLLM scores by cosine, as it trains
            return F.cosine_similarity(representation, model.item_embedding(items), dim=-1)
        return super().score_items(model, representation, items)

    def score_all(self, model, representation):
        if model.loss_type == "InfoNCE":
            return F.normalize(representation, dim=-1) @ F.normalize(model.item_embedding.weight[: model.n_items], dim=-1).T
        return super().score_all(model, representation)


@BACKBONE.register("bert4rec")
class Cloze(Backbone):
    """BERT4Rec (Sun et al. 2019): bidirectional attention trained to fill [MASK]ed items
    (masking by RecBole's ``mask_itemseq`` transform, ratio ``mask_ratio``); at evaluation a
    [MASK] after the last item is predicted.

    ``recbole_quirks: true`` reproduces RecBole 1.2.1 exactly, including two behaviours we fix
    by default: its evaluation input drops the oldest item of every sequence (not only of full
    ones), and its loss ignores a mask at position 0 (it tests ``masked_index > 0``).
    """

    causal = False
    extra_tokens = 1
    exact_under_trailing_trim = True
    trailing_slots = 1  # the evaluation [MASK] after the last item
    required_recbole_config = {"transform": "mask_itemseq"}
    trains_on_windows = True  # masked_window: BERT4Rec code's whole-sequence cloze
    # RecBole's BERT4Rec.yaml value: this share of training batches masks only each row's last item,
    # the position a [MASK] takes at evaluation (Sun et al. 2019 §3.6; RecBole's mask_itemseq calls
    # them fine-tuning samples). Without them (RecBole's transform falls back to 0 when the key is
    # absent, as it was for SeqTransformer before 2026-12-01) the cloze only ever fills masks inside
    # the history, and on Amazon's short rows it learns the last position poorly (fearec-t2's
    # BERT4Rec cells, docs/reproduction.md).
    fine_tuning_ratio = 0.5

    @dataclass(frozen=True)
    class Options:
        recbole_quirks: bool = False

    @classmethod
    def check_config(cls, values) -> Iterator[tuple[str, str]]:
        if setting_or_none(values, "ft_ratio") is not None and values["training_samples"] == "windows":
            yield "ft_ratio", ("applies to training on prefixes (RecBole's mask_itemseq transform); "
                               "training_samples: windows masks each window in the forward pass")

    @classmethod
    def derived_recbole_config(cls, values) -> dict:
        derived = super().derived_recbole_config(values)
        if setting_or_none(values, "ft_ratio") is None and values["training_samples"] == "prefixes":
            derived["ft_ratio"] = cls.fine_tuning_ratio
        return derived

    def __init__(self, options, model, config):
        super().__init__(options, model, config)
        if config["MASK_ITEM_SEQ"] is None:
            raise ConfigError("backbone 'bert4rec' needs `transform: mask_itemseq` in the config (recbole-ext run sets it)")
        self.mask_fields = (config["MASK_ITEM_SEQ"], config["POS_ITEMS"], config["NEG_ITEMS"], config["MASK_INDEX"])
        self.mask_ratio = config["mask_ratio"]
        self.targets_in_last_batch = torch.zeros(())  # a tensor: read (synchronised) only when asked
        hidden, eps = model.dims.hidden_size, model.dims.layer_norm_eps
        self.output_ffn = nn.Linear(hidden, hidden)
        self.output_ln = nn.LayerNorm(hidden, eps=eps)
        self.output_bias = nn.Parameter(torch.zeros(model.n_items))

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.output_ln(F.gelu(self.output_ffn(hidden)))

    def training_loss(self, model, interaction):
        masked_seq_field, positive_field, negative_field, index_field = self.mask_fields
        if model.trains_on_windows:
            masked_seq, masked_index, positive = self.masked_window(model, interaction)
            negative = None
            if model.loss_type in ("BPR", "BCE"):
                negative = model.window_negatives.sample(interaction[model.USER_ID][:, None].expand_as(positive))
        else:  # RecBole's mask_itemseq transform masked the prefix rows
            masked_seq = interaction[masked_seq_field]
            masked_index = interaction[index_field]  # [B, M] positions of the masks, 0-padded
            positive = interaction[positive_field]  # [B, M] target items, 0-padded
            negative = interaction[negative_field] if model.loss_type in ("BPR", "BCE") else None
        output = model.encode(masked_seq, causal=False, reads=masked_index)
        states = self.head(output.at(masked_index))  # [B, M, D]: the head runs on masked positions only
        targets = (masked_index > 0 if self.options.recbole_quirks else positive > 0).float()
        self.targets_in_last_batch = targets.detach().sum()
        if model.loss_type in ("BPR", "BCE"):
            positive_score = self.score_items(model, states, positive)
            negative_score = self.score_items(model, states, negative)
            if model.loss_type == "BPR":
                losses = -torch.log(1e-14 + torch.sigmoid(positive_score - negative_score))
            else:
                losses = F.softplus(-positive_score) + F.softplus(negative_score)
            total = (losses * targets).sum()
        else:
            # Scores over all items only at the real masks: RecBole's transform pads every prefix to
            # int(mask_ratio · max length) mask slots, which short histories (Amazon's ~9 items) mostly
            # leave empty, and the [slots, items] logits are the step's biggest product.
            chosen = targets.bool()
            total = F.cross_entropy(self.score_all(model, states[chosen]), positive[chosen], reduction="sum")
        # A batch can hold no [MASK] at all: the few short rows an epoch's last batch may be left
        # with (4 rows of Clothing's prefixes did, in its 9th epoch) each stay unmasked with
        # probability (1 - mask_ratio)^length. RecBole's 0/0 makes that step NaN and ends the run;
        # here it is a zero loss with zero gradients.
        return total / targets.sum().clamp_min(1), output

    def window_target_count(self, model, interaction) -> int:
        """The [MASK]s of the last training pass: the masks are drawn in the forward pass (an ARM
        replay redraws the same ones from the same random state)."""
        return int(self.targets_in_last_batch)

    def masked_window(self, model, interaction) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """BERT4Rec's own training (``training_samples: windows``): the user's latest window, the
        row's target appended, with each real item replaced by [MASK] with probability
        ``mask_ratio`` (Sun et al. 2019, §3.6; its code masks whole user sequences, not prefixes).
        Returns the masked sequence [B, L], the masks' positions [B, M] and their items [B, M]
        (both 0-padded, as RecBole's transform gives them for prefixes)."""
        window, _ = append_after_history(interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN],
                                         interaction[model.POS_ITEM_ID], model.max_seq_length)
        # Drawn at the full [B, max length] shape whatever the batch's width: trimmed batches
        # (models/trimming.py) then mask exactly the items untrimmed ones do.
        draws = torch.rand(window.size(0), model.max_seq_length, device=window.device)[:, : window.size(1)]
        masked = (window > 0) & (draws < self.mask_ratio)
        counts = masked.sum(1)
        # Masked positions first, in order (a stable sort of "not masked"), cut to the most per row.
        order = torch.sort((~masked).to(torch.int8), dim=1, stable=True).indices[:, : max(int(counts.max()), 1)]
        real = torch.arange(order.size(1), device=order.device)[None, :] < counts[:, None]
        masked_index = torch.where(real, order, torch.zeros_like(order))
        positive = torch.where(real, window.gather(1, order), torch.zeros_like(order))
        return window.masked_fill(masked, model.n_items), masked_index, positive

    def score_items(self, model, representation, items):
        return super().score_items(model, representation, items) + self.output_bias[items]

    def score_all(self, model, representation):
        return super().score_all(model, representation) + self.output_bias

    def evaluation_input(self, model, item_seq: torch.Tensor, lengths: torch.Tensor):
        """The sequence with [MASK] appended, and the mask's position."""
        mask_token = model.n_items
        batch = torch.arange(item_seq.size(0), device=item_seq.device)
        if self.options.recbole_quirks:
            padded = F.pad(item_seq, (0, 1))
            padded[batch, lengths] = mask_token
            return padded[:, 1:], lengths - 1
        mask_tokens = torch.full_like(lengths, mask_token)
        return append_after_history(item_seq, lengths, mask_tokens, max_length=item_seq.size(1))

    def user_representation(self, model, interaction):
        item_seq, position = self.evaluation_input(model, interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN])
        output = model.encode(item_seq, causal=False, reads=position)
        return self.head(output.at(position))
