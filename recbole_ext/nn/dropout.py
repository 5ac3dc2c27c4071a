"""Inverted dropout with a cheaper random stream.

``nn.Dropout`` draws its mask with ``bernoulli_``, which on CPU costs ~2x a uniform draw plus a
compare: in RecBole's SASRec step (batch 2048, length 50) dropout was a third of the step
(``benchmarks/train_step.py``). ``impl="fast"`` builds the mask from raw random bits instead (see
:func:`scaled_keep_mask`): 16 bits per element, compared and turned into 0/1 bytes by numpy, then
one conversion to the input's dtype. On this project's CPU, drawing float uniforms was the costly
part of the earlier form, and torch's compare and ``bool`` → ``bfloat16`` conversion were slower than
numpy's compare plus a ``uint8`` conversion.
``impl="torch"`` uses ``F.dropout``: the exact random stream of RecBole's models, for bit-identical
runs against them.

The distribution: an element is dropped with probability p' = round(p · 2^16) / 2^16
(|p' − p| ≤ 2^-17, p' = p for p = 0.5, 0.25, ...), and survivors are scaled by 1 / (1 − p'), so the
expected output equals the input exactly. ``nn.Dropout`` keeps p and scales by 1 / (1 − p).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from recbole_ext.nn.context import RowSelection

DropoutImpl = Literal["fast", "torch"]
_LEVELS = 1 << 16  # one int16 of random bits per element


def quantized_drop_probability(p: float) -> float:
    """p', the drop probability the fast mask realises: p rounded to a multiple of 2^-16."""
    return round(p * _LEVELS) / _LEVELS


def scaled_keep_mask(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
    """Mask of 0 and 1 / (1 − p'): drop with probability p' (:func:`quantized_drop_probability`).

    On CPU the bits come from numpy's SFC64, seeded by one draw from torch's generator, so
    ``torch.manual_seed`` (RecBole's ``init_seed``) still makes runs repeatable. Elsewhere (and
    inside ``torch.compile``, which numpy would break) from ``torch.rand``.
    ``rows``: only these rows (first dimension) of the mask drawn for ``shape``.
    """
    dropped = quantized_drop_probability(p)
    if device.type != "cpu" or torch.compiler.is_compiling():
        kept = torch.rand(shape, device=device).ge_(dropped)
    else:
        count = math.prod(shape)
        seed = int(torch.randint(0, 2**62, (1,)).item())
        bits = np.random.SFC64(seed).random_raw((count + 3) // 4).view(np.int16)[:count]  # uniform on [-2^15, 2^15)
        kept = torch.from_numpy(np.greater_equal(bits, round(dropped * _LEVELS) - _LEVELS // 2).view(np.uint8)).view(shape)
    if rows is not None:
        kept = kept.index_select(0, rows.to(kept.device))
    return kept.to(dtype).mul_(1.0 / (1.0 - dropped))


class Dropout(nn.Module):
    def __init__(self, p: float, impl: DropoutImpl = "fast"):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p
        self.impl = impl

    def forward(self, x: torch.Tensor, rows: "RowSelection | None" = None) -> torch.Tensor:
        """``rows``: x [R, ...] holds only these rows of the layer's full input; the mask is drawn for
        all of them and these rows are kept (the random stream and values of the full layer)."""
        if not self.training or self.p == 0.0:
            return x
        # p' of 0 or 1 (p within 2^-17 of either end) has no fast mask: torch's draws keep p exact.
        if self.impl == "torch" or quantized_drop_probability(self.p) in (0.0, 1.0):
            if rows is None:
                return F.dropout(x, self.p, training=True)
            full_mask = F.dropout(x.new_ones((rows.total, *x.shape[1:])), self.p, training=True)
            return x * full_mask.index_select(0, rows.index)
        if rows is None:
            return x * scaled_keep_mask(x.shape, self.p, x.dtype, x.device)  # one multiply forward and backward
        return x * scaled_keep_mask(torch.Size((rows.total, *x.shape[1:])), self.p, x.dtype, x.device, rows.index)

    def extra_repr(self) -> str:
        return f"p={self.p}, impl={self.impl}"
