"""The data side of window training (``data/windows.py``); the model side and the loader built by
``runner.build`` are tested in tests/models/test_window_training.py."""
from __future__ import annotations

import torch

from recbole_ext.data.windows import last_row_per_user


def test_each_users_last_row_in_row_order():
    users = torch.tensor([3, 3, 1, 1, 1, 7, 3])  # user 3's rows need not be contiguous
    assert last_row_per_user(users).tolist() == [4, 5, 6]


def test_no_rows_no_windows():
    assert last_row_per_user(torch.tensor([], dtype=torch.long)).tolist() == []
