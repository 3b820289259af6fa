"""CJK ideographs become one token each in both tokenizers, as in BERT's BasicTokenizer (§3, reference
tokenization.py), checked against transformers' BertTokenizer on an exported vocab.txt."""
import pytest

from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer, basic_tokenize, has_cjk

TEXTS = ["我们有两本书，一只猫。", "他們有兩本書。", "我的cat在北京。"] * 20


def test_basic_tokenize_splits_han_characters():
    assert basic_tokenize("我的cat在北京。") == ["我", "的", "cat", "在", "北", "京", "。"]
    assert basic_tokenize("兩本書") == ["兩", "本", "書"]


def test_has_cjk():
    assert has_cjk("一只猫") and has_cjk("abc書") and not has_cjk("cat") and not has_cjk("こんにちは")


@pytest.mark.parametrize("build", [lambda t: WordTokenizer.build(t), lambda t: WordPieceTokenizer.train(t, vocab_size=120)])
def test_both_kinds_give_single_characters_and_match_transformers(build, tmp_path):
    from transformers import BertTokenizer
    tok = build(TEXTS)
    assert tok.tokenize("我们有两只猫。") == ["我", "们", "有", "两", "只", "猫", "。"]
    assert not any(len(t.lstrip("#")) > 1 and has_cjk(t) for t in tok.vocab)  # no multi-character Han token
    tok.save(tmp_path)
    hf = BertTokenizer(str(tmp_path / "vocab.txt"), do_lower_case=True)
    for text in ["我们有两只猫。", "他們有兩本書。"]:
        assert hf.tokenize(text) == tok.tokenize(text)
