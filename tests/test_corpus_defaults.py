"""One place decides a corpus's defaults (bertcore.data.corpus_defaults): the Train page's path
(explorer.train_form.chosen_defaults) and the CLI's (`bertcore train --corpus FILE`) give the same tokenizer,
vocabulary size and max_seq_len for the same file, and the run records them."""
import json
import random

import pytest

from bertcore.cli import _train_spec, build_parser
from bertcore.data.corpus import SHORT_MAX_SEQ_LEN, load_corpus_file
from bertcore.data.corpus_defaults import corpus_defaults, default_tokenizer
from explorer import train_form

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
    spec = _train_spec(build_parser().parse_args(["train", "--corpus", str(path)]))
    assert page.max_seq_len == spec.train_config.max_seq_len == expect_len
    assert page.tokenizer == spec.tokenizer.kind == "wordpiece"
    assert page.vocab_size == spec.tokenizer_vocab_size and len(page_tok.vocab) == len(spec.tokenizer.vocab)
    assert spec.defaults == page.to_dict()


def test_builtin_keeps_the_preset_and_an_override_wins(tmp_path):
    spec = _train_spec(build_parser().parse_args(["train", "--corpus", "builtin-zh"]))
    assert spec.train_config.max_seq_len == 48 and spec.tokenizer == "word" and spec.defaults is None
    path = _prose(tmp_path / "p.txt", 20)
    spec = _train_spec(build_parser().parse_args(["train", "--corpus", str(path), "--set", "max_seq_len=40"]))
    assert spec.train_config.max_seq_len == 40


def test_the_run_records_the_defaults(tmp_path):
    from bertcore.training import service
    path = _prose(tmp_path / "p.txt", 20, n_paras=20)
    spec = _train_spec(build_parser().parse_args(["train", "--corpus", str(path), "--steps", "2"]))
    result = service.train(spec, tmp_path / "run")
    meta = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert meta["corpus_defaults"]["max_seq_len"] == SHORT_MAX_SEQ_LEN == result.trainer.config.max_seq_len
    assert meta["corpus_defaults"]["tokenizer"] == meta["tokenizer"] == "wordpiece"
