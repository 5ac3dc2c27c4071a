"""``CaserExt``: RecBole's Caser with its 50 horizontal convolutions as a few wide 1-D convolutions
over each sequence's own windows.

Caser (Tang & Wang, WSDM 2018, §3.3) runs one horizontal filter bank per height h = 1..L over the
L×d embedding matrix of the last L items, applies ReLU and max-pools each filter over time.
RecBole's Caser sets L to ``MAX_ITEM_LIST_LENGTH`` and makes each height its own ``Conv2d`` with
one input channel: 50 convolutions per step at FEARec's length 50, each with 8 outputs, which
oneDNN runs at a fraction of the CPU's speed (about 45 minutes per Beauty epoch at one thread,
docs/performance.md "Every model's training step").

Here the same weights run as one 1-D convolution (the d embedding channels as its input channels)
per group of ``HEIGHTS_PER_CONVOLUTION`` heights. Inside a group [a, b], each filter is zero-padded to
height b and the sequence gets b − a zero rows at its end, so one convolution over the windows of
height b starting at t = 0..L−a gives every filter of the group at every start. A start t is a
real window of a height-h filter only when t ≤ L − h; the others are set to 0 after the ReLU,
which never changes the max (a ReLU output is ≥ 0, and every filter has at least one real window)
and gets no gradient. Grouping is a
trade-off: one height per convolution gives 8 output channels, too few to run efficiently; all
heights in one computes three times the needed arithmetic (zero-padded filters). Ten heights per
convolution was the fastest grouping on the 2-core CPU this was written on, and a 1-D convolution
was faster there than a matrix product over explicitly unfolded windows.

Most windows of a short sequence see only padding. RecBole right-pads each sequence with item 0,
whose embedding e₀ is a fixed vector (its lookup gets no gradient; RecBole's initialisation made it
non-zero), so with ``filled`` the position after a sequence's last real item, every window starting
at t ≥ ``filled`` is the same all-e₀ window, and the max over starts needs only t = 0..``filled``.
``forward`` passes the item ids, and sequences are bucketed by ``filled`` ≤ 1, 2, 4, ..., L
(``_length_buckets``: at most twice the starts a sequence needs, in log₂L + 1 passes):
- a bucket of long sequences runs the grouped convolutions above over starts 0..bound only;
- a bucket of short ones (bound ≤ ``SHORT_SEQUENCES_UP_TO`` < L) also cuts every filter's height:
  a window starting at t < ``filled`` has real items under its first ``filled`` − t rows only and e₀
  under the rest, so it is one convolution of the real rows with every filter's first ``bound``
  rows, plus Σ_{k ≥ filled − t} w_k · e₀, a suffix sum over the filter's rows computed once per
  batch (``_ShortSequenceKernels``).
On Amazon data, where most leave-one-out training prefixes are a few items long, this cuts the
layer's arithmetic several times (benchmarks/caser_lengths.py, docs/performance.md); the features
and gradients equal the full computation's up to the order of the sums
(``tests/models/test_caser.py``, in float64).

The parameters, their names, the initialisation, the loss and the scores are RecBole's (this is a
subclass that replaces only ``forward``), so a RecBole Caser checkpoint loads as is and
``tests/models/test_caser.py`` checks outputs and gradients against RecBole's forward.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from recbole_ext.compat import import_recbole_models_without_anomaly

import_recbole_models_without_anomaly()

import recbole  # noqa: E402
from recbole.model.sequential_recommender.caser import Caser  # noqa: E402

HEIGHTS_PER_CONVOLUTION = 10
# A short bucket's convolution costs about bound² · n_h·L products per sequence, the grouped ones
# (bound + 1) · Σ_groups n_h·|group|·height: cut filters are cheaper up to a bound of about 16 at L = 50,
# and 16 and 32 timed alike on Clothing's lengths.
SHORT_SEQUENCES_UP_TO = 16


def horizontal_features(item_seq_emb: torch.Tensor, convs, heights_per_convolution: int = HEIGHTS_PER_CONVOLUTION,
                        item_seq: torch.Tensor | None = None) -> torch.Tensor:
    """Max-pooled ReLU outputs [B, n_h·L] of height-h filters ``convs[h − 1]`` (each a ``Conv2d(1, n_h,
    (h, d))``) over ``item_seq_emb`` [B, L, d], in RecBole's order (all filters of height 1 first).

    With ``item_seq`` [B, L] (the item ids behind the embeddings, 0 for padding), each sequence only
    pays for the windows that start at or before its last item (module docstring)."""
    if item_seq is None:
        return _horizontal_features_up_to(item_seq_emb, convs, heights_per_convolution, item_seq_emb.shape[1])
    length = item_seq.shape[1]
    positions = torch.arange(1, length + 1, device=item_seq.device)
    filled = torch.where(item_seq != 0, positions, 0).amax(dim=1)             # last real item's position + 1
    rows_per_bucket, pooled = [], []
    lower, short = -1, None
    for upper in _length_buckets(length):
        rows = ((filled > lower) & (filled <= upper)).nonzero().squeeze(1)
        lower = upper
        if not rows.numel():
            continue
        rows_per_bucket.append(rows)
        bucket = item_seq_emb.index_select(0, rows)
        if upper <= SHORT_SEQUENCES_UP_TO and upper < length:
            if short is None:
                # e₀ from any sequence shorter than L: RecBole's lookup gives the padding row no gradient
                short = _ShortSequenceKernels(convs, bucket[0, length - 1])
            pooled.append(short.features(bucket, filled.index_select(0, rows), upper))
        else:
            pooled.append(_horizontal_features_up_to(bucket, convs, heights_per_convolution, upper))
    order = torch.cat(rows_per_bucket)
    return torch.cat(pooled).index_select(0, torch.argsort(order))


class _ShortSequenceKernels:
    """``horizontal_features`` of sequences whose rows from ``filled`` on are all the padding
    embedding e₀. A height-h window starting at t is Σ_k w_k · x_{t+k}: its real rows (k < filled − t,
    so k < the bucket's bound) under the first rows of the filter, plus w_k · e₀ summed over the rest,
    a suffix sum that depends only on filled − t (module docstring)."""

    def __init__(self, convs, padding_row: torch.Tensor):
        self.convs = convs
        self.kernels = _stacked_kernels(convs, len(convs))                    # [n_h·L, L, d], RecBole's order
        padding_products = self.kernels @ padding_row                          # [n_h·L, L]: w_k · e₀
        self.suffix_sums = F.pad(padding_products.flip(1).cumsum(1).flip(1), (0, 1)).t()  # [L + 1, n_h·L]: Σ_{k ≥ j}
        self.bias = torch.cat([conv.bias for conv in convs])

    def features(self, item_seq_emb: torch.Tensor, filled: torch.Tensor, upper: int) -> torch.Tensor:
        starts = upper + 1                                                     # t = 0..upper; t = upper is all e₀
        past_the_end = torch.arange(upper, device=filled.device).unsqueeze(0) >= filled.unsqueeze(1)
        real = item_seq_emb[:, :upper].masked_fill(past_the_end.unsqueeze(2), 0.0)             # [B, upper, d]
        outputs = F.conv1d(F.pad(real.transpose(1, 2), (0, upper)), self.kernels[:, :upper].transpose(1, 2))
        first_padding_row = (filled.unsqueeze(1) - torch.arange(starts, device=filled.device)).clamp(min=0)
        outputs = outputs + self.suffix_sums[first_padding_row].transpose(1, 2) + self.bias.unsqueeze(1)
        beyond = _past_last_start(self.convs, len(self.convs), starts, outputs.device)
        return torch.relu(outputs).masked_fill(beyond, 0.0).amax(dim=2)      # [B, n_h·L]


def _stacked_kernels(convs, height: int) -> torch.Tensor:
    """The filters of ``convs``, each zero-padded at its end to ``height`` rows: [n_h·|convs|, height, d]."""
    return torch.cat([F.pad(conv.weight.view(conv.out_channels, conv.kernel_size[0], -1), (0, 0, 0, height - conv.kernel_size[0]))
                      for conv in convs])


def _past_last_start(convs, length: int, starts: int, device) -> torch.Tensor:
    """[n_h·|convs|, starts]: True where start t is past a filter's last real window, t > L − h."""
    last_start = torch.tensor([length - conv.kernel_size[0] for conv in convs for _ in range(conv.out_channels)], device=device)
    return torch.arange(starts, device=device) > last_start.unsqueeze(1)


def _length_buckets(length: int) -> list[int]:
    """Upper bounds 1, 2, 4, ..., L on a bucket's filled length: a sequence pays for at most twice the
    windows it needs, in log2(L) + 1 passes."""
    bounds, upper = [], 1
    while upper < length:
        bounds.append(upper)
        upper *= 2
    return bounds + [length]


def _horizontal_features_up_to(item_seq_emb: torch.Tensor, convs, heights_per_convolution: int,
                               last_needed_start: int) -> torch.Tensor:
    """``horizontal_features`` from the windows starting at t = 0..``last_needed_start`` only."""
    length = item_seq_emb.shape[1]
    channels_first = item_seq_emb.transpose(1, 2)                              # [B, d, L]
    pooled = []
    for low in range(1, length + 1, heights_per_convolution):
        high = min(low + heights_per_convolution - 1, length)
        group = convs[low - 1:high]
        weight = _stacked_kernels(group, high).transpose(1, 2)                 # [n_h·|group|, d, high]
        bias = torch.cat([conv.bias for conv in group])
        starts = min(last_needed_start, length - low) + 1
        # zero rows at the end, so a height-``high`` window starts at every t = 0..L − low
        windows = F.pad(channels_first, (0, high - low))[:, :, :starts + high - 1]
        outputs = torch.relu(F.conv1d(windows, weight, bias))                  # [B, n_h·|group|, starts]
        beyond = _past_last_start(group, length, starts, outputs.device)
        pooled.append(outputs.masked_fill(beyond, 0.0).amax(dim=2))
    return torch.cat(pooled, dim=1)


class CaserExt(Caser):
    """RecBole's Caser, same parameters and defaults, with a faster horizontal convolution layer."""

    DEFAULT_CONFIG = Path(recbole.__file__).parent / "properties" / "model" / "Caser.yaml"

    def forward(self, user, item_seq):
        item_seq_emb = self.item_embedding(item_seq)                            # [B, L, d]
        features = []
        if self.n_v:
            features.append(self.conv_v(item_seq_emb.unsqueeze(1)).view(-1, self.fc1_dim_v))
        if self.n_h:
            features.append(horizontal_features(item_seq_emb, self.conv_h, item_seq=item_seq))
        hidden = self.ac_fc(self.fc1(self.dropout(torch.cat(features, dim=1))))
        return self.ac_fc(self.fc2(torch.cat([hidden, self.user_embedding(user).squeeze(1)], dim=1)))
