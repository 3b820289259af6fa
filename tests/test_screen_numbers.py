"""Issue 26: every number on screen true. A page that states a rate, a size, an init or a LayerNorm states the one of
the model (or the widget) in use, never BERT's default; checked here with models whose values differ from BERT's.
(The Masking & NSP sliders: tests/test_pages_learn.py; the Train page: tests/test_train_page.py; Predict's held-out
count: tests/test_pages_inspect.py.)"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from apptest_pages import open_page
import torch

from bertcore.config import BertConfig
from bertcore.presets import PRESETS
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer
from bertcore.io.checkpoint import ModelBundle
from bertcore.model.bert import embedding_init, init_model
from explorer.session.workspace import ActiveModel

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tok():
    return WordTokenizer.build(builtin_corpus(seed=0, n_pairs=400).texts())


def _untrained(name: str, tok) -> ActiveModel:
    cfg = BertConfig(**{**PRESETS[name][0], **SMALL, "vocab_size": tok.vocab_size})
    bundle = ModelBundle(model=init_model(cfg, 0).eval(), tokenizer=tok, history=None, name=name, source="test")
    return ActiveModel(bundle, f"untrained {name}", "untrained", False)


@pytest.mark.parametrize("name", list(PRESETS))
def test_embedding_init_says_how_the_tables_are_drawn(name, tok):
    """embedding_init describes the distribution init_model really draws each table from (measured here)."""
    cfg = BertConfig(**{**PRESETS[name][0], "vocab_size": tok.vocab_size})
    emb = init_model(cfg, 0).bert.embeddings
    w = emb.word_embeddings.weight.detach()[1:]  # row 0 may be the zero padding row
    text = embedding_init(cfg, cfg.vocab_size)
    if cfg.init == "bert":
        assert text == f"normal(0, {cfg.initializer_range:g})" and abs(w.std() - cfg.initializer_range) < 0.01
    elif cfg.init == "pytorch":
        assert text.startswith("normal(0, 1)") and abs(w.std() - 1) < 0.05
    else:
        bound = math.sqrt(6 / (cfg.vocab_size + cfg.hidden_size))
        assert text == f"Xavier-uniform U(±{bound:.3g})" and bound * 0.98 < w.abs().max() <= bound


def test_positional_page_states_the_active_models_init_and_layernorm(tok):
    """d2l (init=pytorch, no embedding LayerNorm): the page says N(0, 1), not BERT's normal(0, initializer_range),
    and that the sum reaches layer 1 without a LayerNorm; the default model says its own std and its LayerNorm."""
    at = open_page("app_pages/positional_encoding.py", _untrained("d2l", tok))
    warn = " ".join(w.value for w in at.warning)
    captions = " ".join(c.value for c in at.caption)
    assert "random** (normal(0, 1), nn.Embedding's default init)" in warn
    assert "random token vectors normal(0, 1), nn.Embedding's default and segment vectors normal(0, 1)" in captions
    assert "without a LayerNorm" in captions and "LayerNorm row" not in captions
    unused = BertConfig(**{**PRESETS["d2l"][0], **SMALL, "vocab_size": tok.vocab_size}).initializer_range
    assert f"{unused:g}" not in warn + captions  # initializer_range is set, but init=pytorch never draws from it

    at = open_page("app_pages/positional_encoding.py", _untrained("original BERT", tok))
    warn = " ".join(w.value for w in at.warning)
    captions = " ".join(c.value for c in at.caption)
    r = BertConfig(**{**PRESETS["original BERT"][0], **SMALL, "vocab_size": tok.vocab_size}).initializer_range
    assert f"normal(0, {r:g}) init" in warn and f"random token vectors normal(0, {r:g})" in captions
    assert "the LayerNorm row rescales their sum" in captions


def test_embeddings_page_says_what_layer_0_is_for_the_active_model(tok):
    """Layer 0 is the embedding output as the model builds it: no LayerNorm and sinusoidal positions for
    BERT-pytorch; token, segment, learned position and a LayerNorm for BERT."""
    at = open_page("app_pages/embeddings.py", _untrained("BERT-pytorch (codertimo)", tok))
    text = " ".join(m.value for m in at.markdown)
    assert "Layer 0 is the embedding output (token + segment + position (sinusoidal));" in text
    assert "LayerNorm" not in text
    at = open_page("app_pages/embeddings.py", _untrained("original BERT", tok))
    text = " ".join(m.value for m in at.markdown)
    assert "Layer 0 is the embedding output (token + segment + position (learned) → LayerNorm);" in text


def test_d2l_hidden_state_zero_really_has_no_layernorm(tok):
    """The oracle behind the page's words: d2l's layer 0 is the plain sum (mean not 0 per token), BERT's is
    LayerNorm-ed (mean 0 per token)."""
    ids = torch.tensor([tok.encode("the cat eats the cheese")])
    for name, normed in (("d2l", False), ("original BERT", True)):
        m = _untrained(name, tok).model
        with torch.no_grad():
            h0 = m(ids, output_hidden_states=True).hidden_states[0]
        assert (h0.mean(-1).abs().max() < 1e-5) == normed
