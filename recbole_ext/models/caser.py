"""``CaserExt``: RecBole's Caser with its 50 horizontal convolutions as five wide 1-D convolutions.

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


def horizontal_features(item_seq_emb: torch.Tensor, convs, heights_per_convolution: int = HEIGHTS_PER_CONVOLUTION) -> torch.Tensor:
    """Max-pooled ReLU outputs [B, n_h·L] of height-h filters ``convs[h − 1]`` (each a ``Conv2d(1, n_h,
    (h, d))``) over ``item_seq_emb`` [B, L, d], in RecBole's order (all filters of height 1 first)."""
    length, dim = item_seq_emb.shape[1:]
    channels_first = item_seq_emb.transpose(1, 2)                              # [B, d, L]
    pooled = []
    for low in range(1, length + 1, heights_per_convolution):
        high = min(low + heights_per_convolution - 1, length)
        group = convs[low - 1:high]
        n_filters = group[0].out_channels
        weight = torch.cat([F.pad(conv.weight.view(n_filters, conv.kernel_size[0], dim), (0, 0, 0, high - conv.kernel_size[0]))
                            for conv in group]).transpose(1, 2)                  # [n_h·|group|, d, high]
        bias = torch.cat([conv.bias for conv in group])
        # zero rows at the end, so a height-``high`` window starts at every t = 0..L − low
        outputs = torch.relu(F.conv1d(F.pad(channels_first, (0, high - low)), weight, bias))  # [B, n_h·|group|, L − low + 1]
        last_start = torch.arange(length - low, length - high - 1, -1, device=outputs.device).repeat_interleave(n_filters)
        beyond = torch.arange(outputs.shape[2], device=outputs.device) > last_start.unsqueeze(1)
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
            features.append(horizontal_features(item_seq_emb, self.conv_h))
        hidden = self.ac_fc(self.fc1(self.dropout(torch.cat(features, dim=1))))
        return self.ac_fc(self.fc2(torch.cat([hidden, self.user_embedding(user).squeeze(1)], dim=1)))
