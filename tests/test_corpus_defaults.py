"""One place decides a corpus's defaults (bertcore.data.corpus_defaults): the Train page's path
(explorer.parts.train_form.chosen_defaults) and the CLI's (`bertcore train --corpus FILE`) give the same tokenizer,
vocabulary size and max_seq_len for the same file, and the run records them."""
import json
import random

import pytest

from bertcore.cli import build_parser
from bertcore.cli.train import train_spec
from bertcore.data.corpus import SHORT_MAX_SEQ_LEN, load_corpus_file
from bertcore.data.corpus_defaults import corpus_defaults, default_tokenizer
from explorer.parts import train_form

WORDS = [f"w{i}x" for i in range(300)]


def _prose(path, words_per_sentence: int, n_paras: int = 60):
    rng = random.Random(0)
    paras = [" ".join(" ".join(rng.choice(WORDS) for _ in range(words_per_sentence)).capitalize() + "."
                      for _ in range(5)) for _ in range(n_paras)]
    path.write_text("\n\n".join(paras), encoding="utf-8")
    return path


def _page_defaults(monkeypatch, path):
    monkeypatch.setattr(train_form.st, "session_state", {})
    corpus = load_corpus_file(path.read_bytes(), path.name, mode="auto")  # as Data & tokens parses an upload
    first = corpus_defaults(corpus, user_file=True, tokenizer=False)
    tok = default_tokenizer(corpus, first.tokenizer, first.vocab_size)
    return train_form.chosen_defaults(corpus, tok, f"uploaded: {path.name}", "original BERT", "tiny"), tok


@pytest.mark.parametrize("words,expect_len", [(20, SHORT_MAX_SEQ_LEN), (4, 48)])
def test_same_file_same_config_on_page_and_cli(monkeypatch, tmp_path, words, expect_len):
    path = _prose(tmp_path / "prose.txt", words)
    page, page_tok = _page_defaults(monkeypatch, path)
    spec = train_spec(build_parser().parse_args(["train", "--corpus", str(path)]))
    assert page.max_seq_len == spec.train_config.max_seq_len == expect_len
    assert page.tokenizer == spec.tokenizer.kind == "wordpiece"
    assert page.vocab_size == spec.tokenizer_vocab_size and len(page_tok.vocab) == len(spec.tokenizer.vocab)
    assert spec.defaults == page.to_dict()


def test_builtin_keeps_the_preset_and_an_override_wins(tmp_path):
    spec = train_spec(build_parser().parse_args(["train", "--corpus", "builtin-zh"]))
    assert spec.train_config.max_seq_len == 48 and spec.tokenizer == "word" and spec.defaults is None
    path = _prose(tmp_path / "p.txt", 20)
    spec = train_spec(build_parser().parse_args(["train", "--corpus", str(path), "--set", "max_seq_len=40"]))
    assert spec.train_config.max_seq_len == 40


def test_the_run_records_the_defaults(tmp_path):
    from bertcore.launch import service
    path = _prose(tmp_path / "p.txt", 20, n_paras=20)
    spec = train_spec(build_parser().parse_args(["train", "--corpus", str(path), "--steps", "2"]))
    result = service.train(spec, tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert meta["corpus_defaults"]["max_seq_len"] == SHORT_MAX_SEQ_LEN == result.trainer.config.max_seq_len
    assert meta["corpus_defaults"]["tokenizer"] == meta["tokenizer"] == "wordpiece"


def test_the_built_in_vocabulary_size_is_the_built_in_corpus_s():
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.corpus_defaults import BUILTIN_VOCAB_SIZE
    from bertcore.data.tokenization import WordTokenizer

    assert WordTokenizer.build(builtin_corpus().texts()).vocab_size == BUILTIN_VOCAB_SIZE


def test_token_work_is_the_bench_flop_count_per_token():
    """token_work (multiply-adds per token of a forward pass) x 2 FLOPs x 3 (forward + backward) x tokens is
    bench.training's FLOP count of a training step, less the pooler and NSP head (no per-token work)."""
    from bench.training import flops_per_step
    from bertcore.config import BertConfig
    from bertcore.data.corpus_defaults import token_work

    for vocab in (476, 8006):
        cfg = BertConfig(vocab_size=vocab)
        B, T = 256, 28
        flops = flops_per_step(cfg, B, T, 0.15 * B * T, mlm_everywhere=False)
        pooler = 3 * 2 * B * (cfg.hidden_size ** 2 + 2 * cfg.hidden_size)
        assert 6 * B * T * token_work(vocab, cfg, length=T) == pytest.approx(flops - pooler, rel=1e-9)


def test_the_short_length_shrinks_with_the_vocabulary():
    from bertcore.data.corpus_defaults import BUILTIN_VOCAB_SIZE, MIN_MAX_SEQ_LEN, short_max_seq_len, token_work

    sizes = (100, BUILTIN_VOCAB_SIZE, 1000, 1700, 3000, 3756, 8006, 50_000)
    cuts = [short_max_seq_len(v) for v in sizes]
    assert cuts[:3] == [SHORT_MAX_SEQ_LEN] * 3 and cuts[-1] == MIN_MAX_SEQ_LEN == 20
    assert cuts == sorted(cuts, reverse=True) and all(c % 4 == 0 for c in cuts)
    assert cuts[3] == 24 and cuts[5] == cuts[6] == 20  # English WordPiece 1,700; 3,756 and 8,006 characters
    builtin = SHORT_MAX_SEQ_LEN * token_work(BUILTIN_VOCAB_SIZE)
    for v, c in zip(sizes, cuts):  # a step's work near the built-in's (the grid and the floor allow more)
        if c > MIN_MAX_SEQ_LEN:
            assert c * token_work(v) <= 1.1 * builtin


def _chinese(path, n_chars=4000, n_sents=3000):
    rng = random.Random(1)
    chars = [chr(0x4E00 + i) for i in range(n_chars)]
    sents = ["".join(rng.choice(chars) for _ in range(14)) + "。" for _ in range(n_sents)]
    path.write_text("\n\n".join("".join(sents[i:i + 5]) for i in range(0, n_sents, 5)), encoding="utf-8")
    return path


def test_a_large_character_set_gets_the_short_cut_on_page_and_cli(monkeypatch, tmp_path):
    """A Chinese file of long pairs over 4,000 characters: its vocabulary is its character set, so both paths
    offer 20 tokens (not 28), record it, and train with it."""
    path = _chinese(tmp_path / "zh.txt")
    page, page_tok = _page_defaults(monkeypatch, path)
    spec = train_spec(build_parser().parse_args(["train", "--corpus", str(path)]))
    assert page_tok.vocab_size > 4000 and len(spec.tokenizer.vocab) == page_tok.vocab_size
    assert page.max_seq_len == spec.train_config.max_seq_len == 20
    assert spec.defaults == page.to_dict() and "20 tokens" in page.reason
