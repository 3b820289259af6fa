"""Defaults that follow the language (issue 25 part 5): with 简体中文 and a model trained on Chinese, Predict and
Attention pre-fill Chinese sentences its vocabulary knows; an English model keeps the English defaults in either
language; a Chinese model gets Chinese examples even in English (the English defaults would be all [UNK])."""
from __future__ import annotations

import pytest
from apptest_pages import open_page

from bertcore.data.corpora import get_corpus
from bertcore.data.corpus import builtin_corpus
from bertcore.data.tokenization import WordTokenizer, has_cjk
from explorer.parts.examples import Examples, known_examples

DEFAULTS = Examples("the cows [MASK] the hay near the barn .", "the cat eats the cheese .",
                    "the cat eats the cheese .", "it is sticky .")


@pytest.fixture(scope="module")
def zh_corpus():
    return get_corpus("builtin-zh")


@pytest.fixture(scope="module")
def zh_tok(zh_corpus):
    return WordTokenizer.build(zh_corpus.texts())


def _known(tok, ex: Examples) -> bool:
    return all(not tok.unknown_words(t.replace("[MASK]", " ")) for t in (ex.masked, ex.sentence, ex.a, ex.b))


def test_a_chinese_vocabulary_gets_a_chinese_example_it_knows(zh_corpus, zh_tok):
    en = builtin_corpus(seed=0, n_pairs=300)
    ex = known_examples(zh_tok, DEFAULTS, [en, zh_corpus])
    assert ex != DEFAULTS and has_cjk(ex.masked) and ex.masked.count("[MASK]") == 1 and " " not in ex.masked
    assert _known(zh_tok, ex) and (ex.a, ex.b) in zh_corpus.pairs


def test_chinese_first_only_where_the_vocabulary_knows_it(zh_corpus, zh_tok):
    en_tok = WordTokenizer.build(builtin_corpus(seed=0, n_pairs=300).texts())
    assert _known(en_tok, DEFAULTS)
    assert known_examples(en_tok, DEFAULTS, [zh_corpus], prefer=[zh_corpus]) == DEFAULTS
    ex = known_examples(zh_tok, DEFAULTS, [], prefer=[zh_corpus])
    assert has_cjk(ex.a) and _known(zh_tok, ex)


@pytest.fixture(scope="module")
def zh_model(tmp_path_factory):
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.launch import service
    from explorer.session.workspace import ActiveModel

    spec = service.RunSpec(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
                           TrainConfig(steps=3, batch_size=4, warmup_steps=1, eval_every=3, eval_size=8),
                           corpus="builtin-zh", tokenizer="word", probe=None, skills=False)
    run = service.train(spec, tmp_path_factory.mktemp("zh") / "run")
    return ActiveModel(run.bundle, "chinese model", "trained", True)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_predict_and_attention_prefill_chinese_for_a_chinese_model(zh_model, lang):
    at = open_page("app_pages/predict.py", zh_model, lang=lang)
    texts = [t.value for t in at.text_input] + [t.value for t in at.text_area]
    assert any("[MASK]" in t and has_cjk(t) for t in texts), texts
    assert not any("the cows" in t for t in texts)
    # the untrained English model cannot read it (all [UNK]): no side-by-side column by default
    assert at.selectbox(key="pred_compare").value == "(no comparison)"
    at = open_page("app_pages/attention.py", zh_model, lang=lang)
    assert has_cjk(at.text_area(key="attn_a").value) and has_cjk(at.text_area(key="attn_b").value)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_masking_types_a_chinese_pair_for_a_chinese_corpus(lang):
    """Masking & NSP, "type a pair": with the built-in Chinese corpus chosen on Data & tokens the pre-filled pair is
    Chinese and every character is in the corpus's vocabulary (no [UNK] in the masking figure's input)."""
    at = open_page("app_pages/data_tokens.py", lang=lang)
    at.radio(key="dt_source").set_value("built-in Chinese (中文)").run()
    at.switch_page("app_pages/masking_nsp.py").run()
    at.radio(key="mn_source").set_value("type a pair").run()
    assert not at.exception, [e.value for e in at.exception]
    a, b = at.text_input(key="mn_text_a").value, at.text_input(key="mn_text_b").value
    assert has_cjk(a) and has_cjk(b), (a, b)
    tok = WordTokenizer.build(get_corpus("builtin-zh").texts())
    assert not tok.unknown_words(a) and not tok.unknown_words(b)
    at.switch_page("app_pages/data_tokens.py").run()  # back to the English corpus: English pair again
    at.radio(key="dt_source").set_value("built-in").run()
    at.switch_page("app_pages/masking_nsp.py").run()
    at.radio(key="mn_source").set_value("type a pair").run()
    assert not at.exception, [e.value for e in at.exception]
    if lang == "en":
        assert at.text_input(key="mn_text_a").value == "the cat eats the cheese in the kitchen ."
