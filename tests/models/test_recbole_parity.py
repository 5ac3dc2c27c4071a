"""SeqTransformer with the standard parts is RecBole's SASRec / BERT4Rec, numerically."""
from __future__ import annotations

import pytest
import torch
from recbole.data import create_dataset, data_preparation
from recbole.data.transform import construct_transform
from recbole.utils import get_model, init_seed

from recbole_ext.models.recbole_import import state_dict_from_recbole

from ..conftest import tiny_recbole_config

SIZES = {"hidden_size": 32, "inner_size": 64, "n_layers": 2, "n_heads": 2}


def build_pair(recbole_name, ours_overrides, in_tmp, **shared):
    stock_config = tiny_recbole_config(recbole_name, **SIZES, **shared)
    ours_config = tiny_recbole_config("SeqTransformer", **SIZES, **shared, **ours_overrides)
    train_data, valid_data, test_data = data_preparation(ours_config, create_dataset(ours_config))
    construct_transform(stock_config)  # sets the mask field names on the config, as the loaders did on ours
    init_seed(0, True)
    stock = get_model(recbole_name)(stock_config, train_data._dataset)
    ours = get_model("SeqTransformer")(ours_config, train_data._dataset)
    missing = ours.load_state_dict(state_dict_from_recbole(stock.state_dict(), recbole_name), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys
    return stock, ours, train_data, test_data


def first_batch(loader):
    batch = next(iter(loader))
    return batch[0] if isinstance(batch, tuple) else batch


@pytest.mark.parametrize("dropout_impl", ["torch", "fast"])
def test_sasrec_logits_match_after_copying_weights(in_tmp, dropout_impl):
    stock, ours, _, test_data = build_pair("SASRec", {"dropout_impl": dropout_impl}, in_tmp)
    stock.eval(), ours.eval()
    interaction = first_batch(test_data)
    with torch.no_grad():
        assert torch.allclose(stock.full_sort_predict(interaction), ours.full_sort_predict(interaction), atol=1e-5)
        interaction.update(interaction.__class__({"item_id": torch.randint(1, ours.n_items, (len(interaction),))}))
        assert torch.allclose(stock.predict(interaction), ours.predict(interaction), atol=1e-5)


@pytest.mark.parametrize("max_length", [20, 50])
def test_sasrec_training_steps_match_with_torch_dropout(in_tmp, max_length):
    """RecBole's dropout stream draws masks at the full [B, L]: with ``dropout_impl: torch`` training
    batches are neither packed (length 20: rows shorter than L in every batch) nor trimmed (length 50:
    every row is shorter than L), which trimming and packing, on by default, would otherwise do."""
    stock, ours, train_data, _ = build_pair("SASRec", {"dropout_impl": "torch"}, in_tmp, MAX_ITEM_LIST_LENGTH=max_length)
    batches = [b for _, b in zip(range(3), train_data)]
    lengths = torch.cat([batch[ours.ITEM_SEQ_LEN] for batch in batches])
    assert ours.packs_tokens and ours.trims_padding and bool((lengths < max_length).any())
    assert max_length == 20 or int(lengths.max()) < max_length
    ours.eval()
    assert ours.attention_context(batches[0][ours.ITEM_SEQ], causal=True).packed_rows is not None  # no dropout
    losses = {}
    for name, model in (("stock", stock), ("ours", ours)):
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        torch.manual_seed(7)
        losses[name] = []
        for batch in batches:
            optimizer.zero_grad()
            loss = model.calculate_loss(batch)
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    assert losses["stock"] == pytest.approx(losses["ours"], abs=1e-5)


def test_bert4rec_matches_with_recbole_quirks(in_tmp):
    overrides = {"backbone": "{type: bert4rec, recbole_quirks: true}", "dropout_impl": "torch",
                 "hidden_dropout_prob": 0.2, "attn_dropout_prob": 0.2}
    stock, ours, train_data, test_data = build_pair("BERT4Rec", overrides, in_tmp)
    stock.eval(), ours.eval()
    interaction = first_batch(test_data)
    with torch.no_grad():
        assert torch.allclose(stock.full_sort_predict(interaction), ours.full_sort_predict(interaction), atol=1e-5)
        masked = next(iter(train_data))
        assert stock.calculate_loss(masked).item() == pytest.approx(ours.calculate_loss(masked).item(), abs=1e-5)


def test_cloze_evaluation_keeps_the_oldest_item_unless_the_sequence_is_full(in_tmp):
    _, ours, _, _ = build_pair("BERT4Rec", {"backbone": "bert4rec", "hidden_dropout_prob": 0.2,
                                            "attn_dropout_prob": 0.2}, in_tmp)
    mask = ours.n_items
    item_seq = torch.tensor([[4, 5, 6, 0], [1, 2, 3, 4]])
    sequence, position = ours.backbone.evaluation_input(ours, item_seq, torch.tensor([3, 4]))
    assert sequence.tolist() == [[4, 5, 6, mask], [2, 3, 4, mask]]
    assert position.tolist() == [3, 3]


def test_cloze_backbone_without_the_masking_transform_is_a_clear_error(in_tmp):
    from recbole_ext.compat import SafeConfig
    from recbole_ext.errors import ConfigError

    config = SafeConfig(model="SeqTransformer", dataset="ml-100k", config_dict={
        "backbone": "bert4rec", "train_neg_sample_args": None, "user_inter_num_interval": "[0,40]",
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]}, "use_gpu": False, "state": "WARNING"})
    train_data, _, _ = data_preparation(config, create_dataset(config))
    with pytest.raises(ConfigError, match="needs `transform: mask_itemseq`"):
        get_model("SeqTransformer")(config, train_data._dataset)
