"""BERT4Rec's fine-tuning samples (``ft_ratio``): on prefixes, a share of training batches masks only
each row's last item, the position evaluation predicts (Sun et al. 2019 §3.6; RecBole's BERT4Rec.yaml
default 0.5, read by its ``mask_itemseq`` transform). SeqTransformer's cloze had none before
2026-12-01, because RecBole's transform falls back to 0 when the key is absent."""
from __future__ import annotations

import pytest
import torch

from recbole_ext.config import resolve
from recbole_ext.errors import ConfigError
from recbole_ext.repro.plan import cache_key
from recbole_ext.runner import build

from ..conftest import TINY_DATA, tiny_recbole_config

SMALL = {"hidden_size": 16, "inner_size": 32, "hidden_dropout_prob": 0.0, "attn_dropout_prob": 0.0}


def resolved_ft_ratio(*overrides: str):
    values = resolve(TINY_DATA, ["model=SeqTransformer", *overrides]).values
    return values.get("ft_ratio", "absent")


def test_the_cloze_on_prefixes_gets_recboles_default_and_keeps_a_set_value():
    assert resolved_ft_ratio("backbone=bert4rec") == 0.5
    assert resolved_ft_ratio("backbone=bert4rec", "ft_ratio=0.0") == 0.0
    assert resolved_ft_ratio("backbone=bert4rec", "ft_ratio=1.0") == 1.0
    derived = resolve(TINY_DATA, ["model=SeqTransformer", "backbone=bert4rec"])
    explicit = resolve(TINY_DATA, ["model=SeqTransformer", "backbone=bert4rec", "ft_ratio=0.5"])
    assert cache_key(derived, "cpu", data=[]) == cache_key(explicit, "cpu", data=[])


def test_configs_that_never_read_it_do_not_carry_it_so_their_cache_keys_stay():
    """SASRec-backbone and window-trained cloze configs resolve without the key: the cells cached
    before it existed keep their keys."""
    assert resolved_ft_ratio() == "absent"
    assert resolved_ft_ratio("backbone=bert4rec", "training_samples=windows") == "absent"


def test_no_fine_tuning_batches_is_the_recipe_cells_cached_before_the_key_trained():
    """``ft_ratio: 0`` is what RecBole's transform read when the key was absent: such a config has the
    cache key of one resolved without it, and a run directory written before the key existed resumes
    at 0, not at today's default."""
    from recbole_ext.runner import with_later_keys_at_former_values

    explicit = resolve(TINY_DATA, ["model=SeqTransformer", "backbone=bert4rec", "ft_ratio=0.0"])
    before = resolve(TINY_DATA, ["model=SeqTransformer", "backbone=bert4rec"])
    del before.values["ft_ratio"]  # as resolved before 2026-12-01
    assert cache_key(explicit, "cpu", data=[]) == cache_key(before, "cpu", data=[])
    assert with_later_keys_at_former_values(before.as_dict())["ft_ratio"] == 0.0
    sasrec = resolve(TINY_DATA, ["model=SeqTransformer"]).as_dict()
    assert "ft_ratio" not in with_later_keys_at_former_values(sasrec)


@pytest.mark.parametrize("overrides, needle", [
    (["ft_ratio=0.5"], "ft_ratio: is read by the bert4rec backbone's training on prefixes, not by backbone 'sasrec'"),
    (["backbone=bert4rec", "training_samples=windows", "ft_ratio=0.5"],
     "ft_ratio: applies to training on prefixes"),
    (["backbone=bert4rec", "ft_ratio=1.5"], "ft_ratio: must be in [0.0, 1.0], got 1.5"),
    (["backbone=bert4rec", "ft_ratoi=0.5"], "unknown key 'ft_ratoi' (did you mean 'ft_ratio'?)"),
])
def test_a_share_the_configuration_cannot_use_is_a_one_line_error_naming_the_key(overrides, needle):
    with pytest.raises(ConfigError) as caught:
        resolve(TINY_DATA, ["model=SeqTransformer", *overrides])
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def masked_batch(ft_ratio: float):
    model, _, (train_data, _, _) = build(tiny_recbole_config("SeqTransformer", **SMALL, backbone="bert4rec",
                                                             ft_ratio=ft_ratio))
    return model, next(iter(train_data))


def test_a_fine_tuning_batch_masks_only_each_rows_last_item_and_trains_on_it(in_tmp):
    model, batch = masked_batch(1.0)  # every batch a fine-tuning batch
    masked_seq_field, positive_field, _, _ = model.backbone.mask_fields
    lengths, items = batch[model.ITEM_SEQ_LEN], batch[model.ITEM_SEQ]
    masked = batch[masked_seq_field] == model.n_items
    last = torch.arange(items.size(1))[None, :] == (lengths - 1)[:, None]
    assert torch.equal(masked, last)
    assert torch.equal(batch[positive_field].max(1).values, items.gather(1, (lengths - 1)[:, None]).squeeze(1))
    model.train()
    loss = model.calculate_loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and int(model.backbone.targets_in_last_batch) == len(batch)


def test_without_fine_tuning_batches_masks_fall_anywhere_in_the_history(in_tmp):
    model, batch = masked_batch(0.0)
    masked_seq_field = model.backbone.mask_fields[0]
    lengths = batch[model.ITEM_SEQ_LEN]
    masked = batch[masked_seq_field] == model.n_items
    last = torch.arange(masked.size(1))[None, :] == (lengths - 1)[:, None]
    assert bool((masked & ~last).any())
