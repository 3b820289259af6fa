"""One place decides the defaults a corpus trains with: tokenizer kind, WordPiece vocabulary size and
max_seq_len. The Train page (explorer/train_form.py) and ``python -m bertcore train --corpus FILE`` both call
``corpus_defaults``, so one file gives one run configuration, and the run records it (run.json ``corpus_defaults``).

* Built-in corpora (``bertcore.data.corpora.is_builtin_spec``) keep the preset's tokenizer and length.
* A user's file (an upload on the page, a path on the CLI) at the preset's word-level default gets WordPiece
  (BERT §3 "Input/Output Representations": real prose has a long tail of rare words; ##pieces keep [UNK] rare)
  with ``suggested_vocab_size``; at size "tiny" its max_seq_len is ``suggested_max_seq_len`` (28 when its median
  pair is longer, as BERT trained 90% of its steps at a shorter length, §A.2).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from bertcore.data.bert_pytorch_vocab import SeedWordTokenizer
from bertcore.data.corpus import suggested_max_seq_len, suggested_vocab_size
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer


@dataclass(frozen=True)
class CorpusDefaults:
    tokenizer: str  # "word" | "wordpiece" | "seed_word"
    vocab_size: int | None  # WordPiece only
    max_seq_len: int | None  # None: keep the preset's
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def default_tokenizer(corpus, kind: str, vocab_size: int | None):
    """The tokenizer these defaults name, built as the Train page builds it."""
    if kind == "wordpiece":
        return WordPieceTokenizer.train(corpus.texts(), vocab_size=int(vocab_size or 1000))
    if kind == "seed_word":
        return SeedWordTokenizer.build(corpus.texts())
    return WordTokenizer.build(corpus.texts())


def corpus_defaults(corpus, *, user_file: bool, preset_tokenizer: str = "word", size: str = "tiny",
                    preset_max_seq_len: int = 48, tokenizer=None) -> CorpusDefaults:
    """The defaults for ``corpus``. ``user_file``: an uploaded/CLI file rather than a built-in corpus;
    ``preset_tokenizer``: the preset's own kind (``bertcore.presets.preset_tokenizer``); ``tokenizer``: the
    tokenizer already built with these defaults (None: built here to measure pair lengths; False: skip the
    length, max_seq_len None)."""
    if not user_file:
        return CorpusDefaults(preset_tokenizer, None, None, "built-in corpus: the preset's tokenizer and length")
    kind = "wordpiece" if preset_tokenizer == "word" else preset_tokenizer
    vocab = suggested_vocab_size(corpus) if kind == "wordpiece" else None
    if size != "tiny":
        return CorpusDefaults(kind, vocab, None, f"user file at size {size}: the preset's length")
    if tokenizer is False:  # the caller asks for the kind and vocabulary only
        return CorpusDefaults(kind, vocab, None, "user file: WordPiece vocabulary from its words")
    if tokenizer is None:
        tokenizer = default_tokenizer(corpus, kind, vocab)
    max_len = suggested_max_seq_len(corpus, tokenizer, preset_max_seq_len)
    why = "median pair longer than" if max_len < preset_max_seq_len else "median pair fits in"
    return CorpusDefaults(kind, vocab, max_len, f"user file: WordPiece vocabulary from its words; {why} the short length")


def train_config_for(train_config, defaults: CorpusDefaults):
    """``train_config`` with what ``defaults`` chose for the corpus (its max_seq_len when one was chosen)."""
    if defaults.max_seq_len is not None:
        train_config = train_config.replace(max_seq_len=defaults.max_seq_len)
    return train_config
