"""bertcore.config: defaults, validation messages, overrides, presets."""
import pytest

from bertcore.config import BertConfig, TrainConfig, check_compatible, split_overrides
from bertcore.presets import PRESETS, preset
from bertcore.errors import ConfigError


def test_defaults_are_tiny_original_bert():
    c = BertConfig()
    assert (c.position_embedding, c.norm_placement, c.mlm_head, c.nsp_head, c.hidden_act) == (
        "learned", "post", "transform", "pooler", "gelu")
    assert c.layer_norm_eps == 1e-12 and c.hidden_dropout_prob == 0.0 == c.attention_probs_dropout_prob
    assert c.hidden_size % c.num_attention_heads == 0
    t = TrainConfig()
    assert (t.mlm_probability, t.mask_token_frac, t.random_token_frac, t.nsp_positive_prob) == (0.15, 0.8, 0.1, 0.5)
    assert abs(t.keep_frac - 0.1) < 1e-9


def test_init_std_defaults_to_fan_in_and_keeps_a_given_value():
    """None = LeCun's 1/sqrt(hidden) (0.125 at the tiny default); a given value (BERT's 0.02) is kept."""
    assert BertConfig().initializer_range == 0.125
    assert BertConfig(hidden_size=256).initializer_range == 0.0625
    assert BertConfig(initializer_range=0.02).initializer_range == 0.02
    c = BertConfig.from_dict(BertConfig().to_dict())  # saved resolved: a reload gives the same number
    assert c.initializer_range == BertConfig().initializer_range
    assert split_overrides({"initializer_range": "0.05"})[0] == {"initializer_range": 0.05}
    assert split_overrides({"initializer_range": "auto"})[0] == {"initializer_range": None}
    with pytest.raises(ConfigError, match="initializer_range"):
        split_overrides({"initializer_range": "big"})


@pytest.mark.parametrize("kw,field,hint", [
    (dict(hidden_size=64, num_attention_heads=5), "num_attention_heads", "pick num_attention_heads"),
    (dict(hidden_act="swish"), "hidden_act", "choose one of"),
    (dict(position_embedding="rotary"), "position_embedding", "choose one of"),
    (dict(hidden_size=15, num_attention_heads=3, position_embedding="sinusoidal"), "hidden_size", "even"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob", "range"),
    (dict(num_hidden_layers=0), "num_hidden_layers", "range"),
])
def test_invalid_model_config_names_field_and_fix(kw, field, hint):
    with pytest.raises(ConfigError) as e:
        BertConfig(**kw)
    assert field in str(e.value) and hint in str(e.value)
    assert isinstance(e.value, ValueError)


def test_invalid_train_config_and_cross_checks():
    with pytest.raises(ConfigError, match="mask_token_frac \\+ random_token_frac"):
        TrainConfig(mask_token_frac=0.9, random_token_frac=0.2)
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        check_compatible(BertConfig(max_position_embeddings=32), TrainConfig(max_seq_len=48))
    with pytest.raises(ConfigError, match="whole number"):
        TrainConfig(steps=2.5)


def test_split_overrides_parses_and_routes():
    b, t = split_overrides({"hidden_size": "128", "lr": "1e-3", "norm_placement": "pre", "steps": "1e2"})
    assert b == {"hidden_size": 128, "norm_placement": "pre"}
    assert t == {"lr": 1e-3, "steps": 100}
    with pytest.raises(ConfigError, match="unknown setting 'hiden_size'.*hidden_size"):
        split_overrides({"hiden_size": "3"})
    with pytest.raises(ConfigError, match="number"):
        split_overrides({"lr": "fast"})


def test_json_roundtrip_and_unknown_keys(tmp_path):
    c = BertConfig(hidden_size=48, num_attention_heads=3, norm_placement="pre")
    c.to_json(tmp_path / "c.json")
    assert BertConfig.from_json(tmp_path / "c.json") == c
    with pytest.raises(ConfigError, match="unknown BertConfig field"):
        BertConfig.from_dict({**c.to_dict(), "bogus": 1})
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        BertConfig.from_json(tmp_path / "bad.json")


def test_presets_build_valid_configs():
    assert "original BERT" in PRESETS and len(PRESETS) >= 5
    for bert_kw, train_kw in PRESETS.values():
        BertConfig(**bert_kw)
        TrainConfig(**train_kw)
    codertimo = BertConfig(**PRESETS["BERT-pytorch (codertimo)"][0])
    assert (codertimo.position_embedding, codertimo.norm_placement, codertimo.hidden_act) == (
        "sinusoidal", "pre", "gelu_tanh")
    for size in ("tiny", "paper"):  # BERT-pytorch's TransformerBlock ends in a dropout, at both sizes
        assert preset("BERT-pytorch (codertimo)", size)[0]["block_dropout"] is True
        assert not any(preset(n, size)[0]["block_dropout"] for n in PRESETS if n != "BERT-pytorch (codertimo)")


@pytest.mark.parametrize("kw,match", [
    (dict(segment_ids="1/2"), r"segment_ids=1/2 needs type_vocab_size=3"),
    (dict(layer_norm_style="rms"), r"layer_norm_style='rms' is not valid; choose one of variance, unbiased_std"),
    (dict(init="kaiming"), r"init='kaiming' is not valid; choose one of bert, pytorch, xavier_uniform"),
    (dict(norm_placement="middle"), r"choose one of post, pre, sublayer_output"),
    (dict(mlm_head="tied"), r"choose one of transform, linear, mlp"),
    (dict(embedding_scale="yes"), r"embedding_scale='yes' must be true or false"),
    (dict(block_dropout=0.1), r"block_dropout=0.1 must be true or false"),
    (dict(train_pad_embedding="no"), r"train_pad_embedding='no' must be true or false"),
    (dict(type_vocab_size=-1), r"type_vocab_size=-1 is out of range"),
])
def test_seed_switches_are_validated_with_the_fix(kw, match):
    with pytest.raises(ConfigError, match=match):
        BertConfig(**kw)


def test_seed_switches_parse_from_key_value_overrides():
    bert_kw, _ = split_overrides({"embedding_scale": "true", "final_layer_norm": "auto", "ffn_dropout": "0",
                                  "type_vocab_size": "3", "segment_ids": "1/2", "block_dropout": "true",
                                  "train_pad_embedding": "yes"})
    c = BertConfig(**bert_kw)
    assert c.embedding_scale is True and c.ffn_dropout is False and c.final_layer_norm is False
    assert c.block_dropout is True and c.train_pad_embedding is True
    assert BertConfig().block_dropout is False and BertConfig().train_pad_embedding is False  # BERT's
    assert BertConfig(norm_placement="pre").final_layer_norm is True  # auto: pre-norm stacks get a final LN
    with pytest.raises(ConfigError, match="ffn_dropout='maybe' must be true or false"):
        split_overrides({"ffn_dropout": "maybe"})
