"""One place decides the defaults a corpus trains with: tokenizer kind, WordPiece vocabulary size and
max_seq_len. The Train page (explorer/parts/train_form.py) and ``python -m bertcore train --corpus FILE`` both call
``corpus_defaults``, so one file gives one run configuration, and the run records it (run.json ``corpus_defaults``).

* Built-in corpora (``bertcore.data.corpora.is_builtin_spec``) keep the preset's tokenizer and length.
* A user's file (an upload on the page, a path on the CLI) at the preset's word-level default gets WordPiece
  (BERT §3 "Input/Output Representations": real prose has a long tail of rare words; ##pieces keep [UNK] rare)
  with ``suggested_vocab_size``; at size "tiny" its max_seq_len is ``suggested_max_seq_len`` (``short_max_seq_len``
  when its median pair is longer, as BERT trained 90% of its steps at a shorter length, §A.2).
* ``short_max_seq_len``: the cut for long pairs, 28 tokens (what a built-in batch pads to) made shorter for a large
  vocabulary, so that a step does about a built-in step's work: every masked token's softmax runs over the whole
  vocabulary (BERT §3.1), and WordPiece keeps every character it has seen, so a Chinese or Japanese text's vocabulary
  is its character set (thousands), where the built-in corpus has 476 words. Never below ``MIN_MAX_SEQ_LEN``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.bert_pytorch_vocab import BertPytorchTokenizer
from bertcore.data.corpus import SHORT_MAX_SEQ_LEN, suggested_max_seq_len, suggested_vocab_size
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer, canonical_kind, unknown_kind

BUILTIN_VOCAB_SIZE = 476  # the built-in corpus's word vocabulary (tests/test_corpus_defaults.py checks it)
MIN_MAX_SEQ_LEN = 20  # room for two short sentences or a couplet, as a learner types them on Predict
LENGTH_GRID = 4  # the Train page's max-length slider moves in steps of 4


def token_work(vocab_size: int, config: BertConfig | None = None, train: TrainConfig | None = None,
               length: int = SHORT_MAX_SEQ_LEN) -> float:
    """Multiply-adds per token of a pre-training forward pass (the backward does about twice the same): per encoder
    layer 4 d^2 (Q, K, V, output) + 2 d F (feed-forward) + 2 T d (attention scores and their mix), and at the
    ``mlm_probability`` share of tokens that are masked the MLM head, d^2 (transform) + d V (decoder)."""
    c, t = config or BertConfig(), train or TrainConfig()
    d = c.hidden_size
    encoder = c.num_hidden_layers * (4 * d * d + 2 * d * c.intermediate_size + 2 * length * d)
    return encoder + t.mlm_probability * (d * d + d * vocab_size)


def short_max_seq_len(vocab_size: int, config: BertConfig | None = None, train: TrainConfig | None = None) -> int:
    """The cut for a corpus of long pairs: SHORT_MAX_SEQ_LEN tokens scaled by the built-in corpus's work per token
    over this vocabulary's (``token_work``), on the slider's grid, between MIN_MAX_SEQ_LEN and SHORT_MAX_SEQ_LEN.
    The built-in corpus's 476 words -> 28, WordPiece 1,700 (English prose) -> 24, a Chinese text's 3,756 or 8,006
    characters -> 20."""
    scale = token_work(BUILTIN_VOCAB_SIZE, config, train) / token_work(int(vocab_size), config, train)
    cut = LENGTH_GRID * round(SHORT_MAX_SEQ_LEN * scale / LENGTH_GRID)
    return int(max(MIN_MAX_SEQ_LEN, min(SHORT_MAX_SEQ_LEN, cut)))


@dataclass(frozen=True)
class CorpusDefaults:
    tokenizer: str  # "word" | "wordpiece" | "bert_pytorch"
    vocab_size: int | None  # WordPiece only
    max_seq_len: int | None  # None: keep the preset's
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def default_tokenizer(corpus, kind: str | None, vocab_size: int | None, min_frequency: int = 2):
    """A new tokenizer of ``kind`` (bertcore.data.tokenization.TOKENIZER_KINDS, or an older name of one; None: word)
    built on ``corpus``: the one builder of the CLI, the launcher and the pages, so a kind means one vocabulary
    everywhere. WordPiece: ``vocab_size`` tokens (1000 if None), ``min_frequency`` as WordPieceTokenizer.train
    reads it."""
    kind = canonical_kind(kind or "word")
    if kind == "wordpiece":
        return WordPieceTokenizer.train(corpus.texts(), vocab_size=int(vocab_size or 1000), min_frequency=min_frequency)
    if kind == "bert_pytorch":
        return BertPytorchTokenizer.build(corpus.texts())
    if kind == "word":
        return WordTokenizer.build(corpus.texts())
    raise unknown_kind(kind)


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
    short = short_max_seq_len(tokenizer.vocab_size)
    max_len = suggested_max_seq_len(corpus, tokenizer, preset_max_seq_len, short=short)
    why = "median pair longer than" if max_len < preset_max_seq_len else "median pair fits in"
    return CorpusDefaults(kind, vocab, max_len, f"user file: WordPiece vocabulary from its words; {why} {short} tokens "
                          f"(the short length for {tokenizer.vocab_size:,} tokens)")


def train_config_for(train_config, defaults: CorpusDefaults):
    """``train_config`` with what ``defaults`` chose for the corpus (its max_seq_len when one was chosen)."""
    if defaults.max_seq_len is not None:
        train_config = train_config.replace(max_seq_len=defaults.max_seq_len)
    return train_config
