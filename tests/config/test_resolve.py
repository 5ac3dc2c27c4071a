"""Config loading and validation: every error names the file and line (or --set) at fault."""
from __future__ import annotations

from pathlib import Path

import pytest

from recbole_ext.config import resolve
from recbole_ext.config.loader import deep_merge, find_config_file
from recbole_ext.errors import ConfigError

from ..conftest import TINY_CONFIG, TINY_DATA


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_extends_chain_merges_with_the_child_winning(tmp_path):
    config = write(tmp_path / "c.yaml", f"extends: {TINY_CONFIG}\nn_layers: 3\nattention: {{scale: 0.5}}\n")
    resolved = resolve(config)
    assert resolved.values["n_layers"] == 3
    assert resolved.values["hidden_size"] == 32  # from tiny_ml100k.yaml
    assert resolved.values["MAX_ITEM_LIST_LENGTH"] == 20  # from tiny_data.yaml
    assert resolved.values["epochs"] == 2 and resolved.values["topk"] == [10, 20]  # base/ml100k.yaml
    assert resolved.values["attention"] == {"type": "softmax", "scale": 0.5}  # merged into the default part
    assert resolved.where("n_layers") == f"{config.resolve()}:2"


def test_changing_a_part_type_replaces_its_options():
    assert deep_merge({"type": "a", "x": 1}, {"type": "b", "y": 2}) == {"type": "b", "y": 2}
    assert deep_merge({"type": "a", "x": 1}, {"y": 2}) == {"type": "a", "x": 1, "y": 2}


def test_bare_names_are_looked_up_in_configs():
    assert find_config_file("quickstart_ml100k.yaml").name == "quickstart_ml100k.yaml"
    assert resolve("quickstart_ml100k.yaml").model_name == "SeqTransformer"


def test_set_overrides_flat_and_nested():
    resolved = resolve(TINY_CONFIG, ["epochs=5", "attention.scale=0.25", "learning_rate=1e-3", "metrics=[NDCG]"])
    assert resolved.values["epochs"] == 5
    assert resolved.values["attention"] == {"type": "softmax", "scale": 0.25}
    assert resolved.values["learning_rate"] == 0.001  # RecBole's float syntax: 1e-3 is a float
    assert resolved.where("epochs") == "--set epochs"


def test_partial_eval_args_keep_sequential_defaults():
    resolved = resolve(TINY_CONFIG, ["eval_args={mode: uni100}"])
    assert resolved.values["eval_args"] == {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "uni100"}


def test_ce_switches_off_training_negatives_unless_set():
    assert resolve(TINY_CONFIG).values["train_neg_sample_args"] is None
    bpr = resolve(TINY_CONFIG, ["loss_type=BPR", "train_neg_sample_args={distribution: uniform, sample_num: 1}"])
    assert bpr.values["train_neg_sample_args"]["sample_num"] == 1


def test_cloze_backbone_derives_the_masking_transform():
    assert resolve(TINY_CONFIG, ["backbone=bert4rec"]).values["transform"] == "mask_itemseq"
    with pytest.raises(ConfigError, match="transform: must be 'mask_itemseq'"):
        resolve(TINY_CONFIG, ["backbone=bert4rec", "transform=crop_itemseq"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n_layer: 3\n", r"c.yaml:3: unknown key 'n_layer' \(did you mean 'n_layers'\?\) for model SeqTransformer"),
        ("learnig_rate: 0.1\n", r"c.yaml:3: unknown key 'learnig_rate' \(did you mean 'learning_rate'"),
        ("n_layers: two\n", r"c.yaml:3: n_layers: expected an integer, got 'two'"),
        ("n_layers: 0\n", r"c.yaml:3: n_layers: must be in \[1, inf\], got 0"),
        ("hidden_dropout_prob: 1.5\n", r"c.yaml:3: hidden_dropout_prob: must be in \[0.0, 1.0\), got 1.5"),
        ("epochs: 2.5\n", r"c.yaml:3: epochs: expected an integer, got 2.5"),
        ("learning_rate: -1.0\n", r"c.yaml:3: learning_rate: must be in \(0, inf\]"),
        ("show_progress: maybe\n", r"c.yaml:3: show_progress: expected true/false, got 'maybe'"),
        ("hidden_act: gelu2\n", r"c.yaml:3: hidden_act: expected one of .*did you mean 'gelu'"),
        ("attention: sofmax\n", r"c.yaml:3: attention: unknown attention 'sofmax' \(did you mean 'softmax'\?\)"),
        ("attention: {type: softmax, scal: 1.0}\n", r"c.yaml:3: attention \(softmax\): unknown option 'scal' \(did you mean 'scale'\?\)"),
        ("position: {scale: 1.0}\n", r"c.yaml:3: position: .*needs 'type'|unknown option"),
        ("aux_losses: [{type: nope}]\n", r"c.yaml:3: aux_losses\[0\]: unknown aux_loss 'nope'"),
        ("n_heads: 3\n", r"hidden_size: 32 is not a multiple of n_heads \(3\)"),
        ("model: SASrec\n", r"c.yaml:3: unknown model 'SASrec' \(did you mean 'SASRec'.*`recbole-ext list`"),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path, text, message):
    config = write(tmp_path / "c.yaml", f"# a config\nextends: {TINY_CONFIG}\n{text}")
    with pytest.raises(ConfigError, match=message) as error:
        resolve(config)
    assert "\n" not in str(error.value)


def test_invalid_yaml_names_the_line(tmp_path):
    config = write(tmp_path / "c.yaml", "model: SeqTransformer\nattention: {type: softmax\nepochs: 3\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: invalid YAML"):
        resolve(config)


def test_duplicate_keys_are_errors(tmp_path):
    config = write(tmp_path / "c.yaml", f"extends: {TINY_CONFIG}\nepochs: 3\nepochs: 4\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: duplicate key 'epochs' \(first set on line 2\)"):
        resolve(config)


def test_missing_files_and_cycles(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: config file not found"):
        resolve(tmp_path / "nope.yaml")
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        resolve(tmp_path / "a.yaml")
    write(tmp_path / "c.yaml", "extends: missing_base.yaml\nmodel: SASRec\n")
    with pytest.raises(ConfigError, match=r"c.yaml:1: base config 'missing_base.yaml' not found"):
        resolve(tmp_path / "c.yaml")


def test_model_and_dataset_are_required(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml: no 'model' key"):
        resolve(write(tmp_path / "c.yaml", "dataset: ml-100k\n"))


def test_non_mapping_file(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:1: a config file must be a mapping"):
        resolve(write(tmp_path / "c.yaml", "- a\n- b\n"))


def test_bad_set_syntax():
    with pytest.raises(ConfigError, match="expected key=value"):
        resolve(TINY_CONFIG, ["epochs"])
    with pytest.raises(ConfigError, match=r"--set n_layers: invalid YAML value '\[1'"):
        resolve(TINY_CONFIG, ["n_layers=[1"])
    with pytest.raises(ConfigError, match=r"--set n_layers: n_layers: expected an integer, got 'x'"):
        resolve(TINY_CONFIG, ["n_layers=x"])


def test_recbole_baseline_keys_are_checked_against_its_yaml():
    resolved = resolve(TINY_DATA, ["model=SASRec", "n_layers=1"])
    assert resolved.values["n_layers"] == 1 and resolved.values["attn_dropout_prob"] == 0.5
    with pytest.raises(ConfigError, match="unknown key 'backbone'"):
        resolve(TINY_DATA, ["model=SASRec", "backbone=sasrec"])
    with pytest.raises(ConfigError, match="n_layers: expected an integer"):
        resolve(TINY_DATA, ["model=SASRec", "n_layers=1.5"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["aux_losses={type: x}"], r"aux_losses: expected a list"),
        (["aux_losses=[3]"], r"aux_losses\[0\]: expected a mapping with 'type' and 'weight'"),
        (["aux_losses=[{type: x, weight: -1.0}]"], r"aux_losses\[0\].weight: must be >= 0"),
        (["attention={type: softmax, scale: 0.0}"], r"attention \(softmax\): scale must be > 0"),
        (["epochs.inner=1"], r"--set epochs.inner: 'epochs' is not a mapping"),
        (["attention.scale=0.5", "attention.scale.deep=1"], r"--set attention.scale.deep: 'scale' is not a mapping"),
        (["attention.scale.deep=1"], r"--set attention.scale.deep: attention \(softmax\).scale: expected a number"),
    ],
)
def test_more_bad_values(overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve(TINY_CONFIG, overrides)


def test_aux_loss_names_must_be_unique_and_not_main():
    from recbole_ext.nn import AUX_LOSS, AuxLoss, parse_aux_losses

    if "test_constant" not in AUX_LOSS.names():
        AUX_LOSS.register("test_constant")(type("Constant", (AuxLoss,), {}))
    with pytest.raises(ConfigError, match=r"names must be unique, repeated: test_constant"):
        parse_aux_losses([{"type": "test_constant"}, {"type": "test_constant"}], "aux_losses")
    with pytest.raises(ConfigError, match=r"name 'main' is reserved"):
        parse_aux_losses([{"type": "test_constant", "name": "main"}], "aux_losses")


def test_extends_must_name_files(tmp_path):
    config = write(tmp_path / "c.yaml", "extends: {a: 1}\nmodel: SASRec\n")
    with pytest.raises(ConfigError, match=r"c.yaml:1: extends must be a file name or a list"):
        resolve(config)


def test_set_reaches_into_lists_by_index_or_name(tmp_path):
    from recbole_ext.config.loader import MergedConfig, apply_overrides

    merged = MergedConfig()
    merged.layer({"aux_losses": [{"type": "a", "weight": 1.0}, {"type": "b", "name": "second"}]}, lambda key: "file")
    apply_overrides(merged, ["aux_losses.0.weight=0.5", "aux_losses.second.weight=2", "aux_losses.a.scale=3"])
    assert merged.values["aux_losses"] == [{"type": "a", "weight": 0.5, "scale": 3}, {"type": "b", "name": "second", "weight": 2}]
    for bad, message in [("aux_losses.5.weight=1", "out of range"), ("aux_losses.c.weight=1", "no entry named 'c'")]:
        with pytest.raises(ConfigError, match=message):
            apply_overrides(merged, [bad])


def test_dotted_set_edits_a_list_that_only_the_model_defaults_define():
    defaults = resolve(TINY_DATA, ["model=Denoiser"]).values["aux_losses"]
    assert len(defaults) > 1
    label = defaults[-1].get("name", defaults[-1]["type"])
    resolved = resolve(TINY_DATA, ["model=Denoiser", f"aux_losses.{label}.weight=0.125"])
    assert resolved.values["aux_losses"][-1]["weight"] == 0.125
    assert resolved.values["aux_losses"][:-1] == defaults[:-1]


def test_keys_a_recbole_model_reads_without_declaring_them_are_accepted():
    """RecBole's FEARec reads contrast/tau/sim, which its FEARec.yaml does not list."""
    resolved = resolve(TINY_DATA, ["model=FEARec", "contrast=us_x", "tau=1", "sim=dot"])
    assert resolved.values["contrast"] == "us_x"
    with pytest.raises(ConfigError, match="unknown key 'contrst'"):
        resolve(TINY_DATA, ["model=FEARec", "contrst=us_x"])


def test_integer_defaults_of_recbole_models_accept_floats():
    """RecBole's FEARec.yaml writes global_ratio: 1; the paper's value is 0.8."""
    assert resolve(TINY_DATA, ["model=FEARec", "global_ratio=0.8"]).values["global_ratio"] == 0.8
    with pytest.raises(ConfigError, match="epochs"):
        resolve(TINY_DATA, ["model=FEARec", "epochs=1.5"])


def test_accepted_keys_are_the_keys_resolve_checks_against():
    from recbole_ext.config.resolve import accepted_keys

    caser, ours = accepted_keys("Caser", "ml-100k"), accepted_keys("SeqTransformer", "ml-100k")
    assert {"embedding_size", "nh", "nv", "train_batch_size"} <= caser and "n_layers" not in caser
    assert {"n_layers", "hidden_size", "attention", "train_batch_size"} <= ours
    with pytest.raises(ConfigError, match="n_layers"):
        resolve(values={"model": "Caser", "dataset": "ml-100k", "n_layers": 2})


def test_a_missing_config_file_names_each_searched_folder_once(tmp_path, monkeypatch):
    """From the repository, its configs/ is both the working directory's and the package's."""
    monkeypatch.chdir(Path(__file__).parents[2])
    with pytest.raises(ConfigError) as error:
        find_config_file("no_such_config.yaml")
    searched = str(error.value).split("also looked in ", 1)[1].rstrip(")").split(", ")
    assert len(searched) == len(set(searched))
