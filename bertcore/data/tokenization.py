"""Tokenizers: a word-level vocabulary, a WordPiece option, and (in bertcore.data.bert_pytorch_vocab) the vocabulary
of the BERT-pytorch tutorial; ``TOKENIZER_KINDS`` names them (``canonical_kind`` reads an older name as today's),
``load_tokenizer`` reopens any of them.

The first two split text exactly like BERT's ``BasicTokenizer`` (Devlin et al. 2019, §3 "Input/Output
Representations"; the reference code's ``tokenization.py``): clean control characters, put spaces
around CJK characters, lowercase and strip accents, split on whitespace and on punctuation (every
non-alphanumeric ASCII character counts as punctuation, plus Unicode category P*). So a vocab.txt
exported from :class:`WordTokenizer` tokenizes identically in transformers' ``BertTokenizer``: a
word-level vocab is just a WordPiece vocab without ``##`` pieces, so every word is either found
whole or becomes ``[UNK]``.

Typed special tokens (``[MASK]``, ``[CLS]``, ``[SEP]``, ``[PAD]``, ``[UNK]``, upper case exactly as
written) are cut out of the text first and survive as single tokens, as transformers does with
its added special tokens. ``canonical_special`` reads a BERT-pytorch vocabulary's ``<sos>``/``<eos>``/``<mask>``...
as the role it plays (``[CLS]``/``[SEP]``/``[MASK]``...), for code that recognises special tokens by name.
"""
from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from bertcore.data.bert_pytorch_vocab import ROLE_TOKENS as BERT_PYTORCH_ROLE_TOKENS
from bertcore.data.bert_pytorch_vocab import SPECIALS as BERT_PYTORCH_SPECIALS
from bertcore.data.bert_pytorch_vocab import BertPytorchTokenizer
from bertcore.data.wordpiece_training import train_vocab
from bertcore.data.tokenizer_base import CACHE_MAX_CHARS, SPECIAL_TOKENS, TokenizerBase, read_vocab_file
from bertcore.errors import TokenizerError
from bertcore.message import Message

PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
TOKENIZER_KINDS = ("word", "wordpiece", "bert_pytorch")
# Older names of a kind, as runs, checkpoints, fine-tunes and RunSpec JSON saved before a rename record them
# (config.json "tokenizer_kind", run.json "tokenizer"): read as today's name wherever a kind is read.
LEGACY_KINDS = {"seed_word": "bert_pytorch"}
_CANONICAL = dict(zip(BERT_PYTORCH_ROLE_TOKENS, SPECIAL_TOKENS))
MAX_WORD_CHARS = 100  # longer words become [UNK], as in BERT's WordPiece (max_input_chars_per_word)
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")


def canonical_special(token: str) -> str:
    """The project spelling of a special token (``<sos>`` -> ``[CLS]``, ``<eos>`` -> ``[SEP]``, ``<mask>`` ->
    ``[MASK]``, ``<pad>`` -> ``[PAD]``, ``<unk>`` -> ``[UNK]``); every other token unchanged."""
    return _CANONICAL.get(token, token)


# ---------------------------------------------------------------- character classes (as in BERT)
def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def has_cjk(text: str) -> bool:
    """True when the text holds a CJK ideograph (Han character), which both tokenizers split off as a
    token of its own (BERT's BasicTokenizer CJK ranges: Chinese has no spaces between words)."""
    return any(_is_cjk(ord(ch)) for ch in text)


def _clean_and_space_cjk(text: str) -> str:
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if _is_whitespace(ch):
            out.append(" ")
        elif _is_cjk(cp):
            out.append(" " + ch + " ")
        else:
            out.append(ch)
    return "".join(out)


def _strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def _split_punct(word: str) -> list[str]:
    pieces: list[str] = []
    cur = []
    for ch in word:
        if _is_punctuation(ch):
            if cur:
                pieces.append("".join(cur))
                cur = []
            pieces.append(ch)
        else:
            cur.append(ch)
    if cur:
        pieces.append("".join(cur))
    return pieces


def _basic_plain(text: str, lower: bool) -> list[str]:
    """BasicTokenizer on text that holds no special token."""
    if text.isascii() and not _ASCII_CONTROL.search(text):  # fast path: ASCII punctuation = non-alnum
        return _ASCII_WORD.findall(text.lower() if lower else text)
    text = unicodedata.normalize("NFC", _clean_and_space_cjk(text))
    out: list[str] = []
    for word in text.split(" "):
        if not word:
            continue
        if lower:
            word = _strip_accents(word.lower())
        out.extend(p for p in _split_punct(word) if p.strip(" "))
    # strip_accents may expose whitespace-free empties only; re-split like HF's final whitespace pass
    return " ".join(out).split()


def basic_tokenize(text: str, lower: bool = True) -> list[str]:
    if not isinstance(text, str):
        raise TokenizerError(f"expected text as str, got {type(text).__name__}; pass a Python string")
    if len(text) > CACHE_MAX_CHARS:  # typed text can be huge: do not pin it in a process-wide cache
        return _basic_tokenize(text, lower)
    return list(_basic_tokenize_cached(text, lower))


@functools.lru_cache(maxsize=1 << 17)
def _basic_tokenize_cached(text: str, lower: bool) -> tuple[str, ...]:
    # Building a vocabulary and pre-tokenizing the pairs both split every corpus sentence: memoize.
    return tuple(_basic_tokenize(text, lower))


def _basic_tokenize(text: str, lower: bool = True) -> list[str]:
    """Split ``text`` into words exactly as HF ``BertTokenizer`` does before WordPiece.

    Matches ``BasicTokenizer(do_lower_case=lower, never_split=SPECIAL_TOKENS,
    tokenize_chinese_chars=True, strip_accents=None)``; in addition typed special tokens are cut
    out even when glued to a word (``"a[MASK]."`` -> ``a [MASK] .``), as transformers' added-token
    matching does.
    """
    out: list[str] = []
    for i, part in enumerate(_SPECIAL_RE.split(text)):
        if i % 2:
            out.append(part)
        elif part:
            out.extend(_basic_plain(part, lower))
    return out


# ---------------------------------------------------------------- word level
class WordTokenizer(TokenizerBase):
    """Whole words from :func:`basic_tokenize`; words not in the vocabulary become [UNK]."""

    kind = "word"

    def __init__(self, vocab: list[str], lower: bool = True):
        self.vocab = list(vocab)
        self.lower = lower
        self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
        if len(self.token_to_id) != len(self.vocab):
            raise TokenizerError(Message("vocabulary has duplicate tokens; each token must appear once"))
        self._init_specials()

    @classmethod
    def build(cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None) -> "WordTokenizer":
        """Vocabulary from ``texts``: specials first, then words by frequency (desc), ties alphabetical.

        ``min_freq`` drops rarer words; ``max_size`` caps the whole vocabulary including the 5 specials.
        """
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise TokenizerError(Message("min_freq={value} must be a whole number >= 1", value=repr(min_freq)))
        if max_size is not None and (not isinstance(max_size, int) or max_size < len(SPECIAL_TOKENS) + 1):
            raise TokenizerError(Message("max_size={value} is too small; it counts the {n} special tokens too, so use "
                                         "at least {least} (or None for no cap)", value=repr(max_size),
                                         n=len(SPECIAL_TOKENS), least=len(SPECIAL_TOKENS) + 1))
        counts: Counter = Counter()
        for t in texts:
            counts.update(w for w in basic_tokenize(t) if w not in SPECIAL_TOKENS and len(w) <= MAX_WORD_CHARS)
        words = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
        if not words:
            raise TokenizerError(Message("no word occurs at least min_freq={min_freq} times; lower min_freq or add "
                                         "text", min_freq=min_freq))
        if max_size is not None:
            words = words[: max_size - len(SPECIAL_TOKENS)]
        return cls(SPECIAL_TOKENS + words)

    def _known(self, w: str) -> bool:
        return w in self.token_to_id and len(w) <= MAX_WORD_CHARS

    def tokenize(self, text: str) -> list[str]:
        return [w if self._known(w) else UNK for w in basic_tokenize(text, self.lower)]

    def _encode(self, text: str) -> list[int]:
        get, unk = self.token_to_id.get, self.unk_id
        return [get(w, unk) if len(w) <= MAX_WORD_CHARS else unk for w in basic_tokenize(text, self.lower)]

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` that map to [UNK] (in order, repeats kept)."""
        return [w for w in basic_tokenize(text, self.lower) if not self._known(w) and w != UNK]

    def word_pieces(self, text: str) -> list[tuple[str, list[str]]]:
        return [(w, [w if self._known(w) else UNK]) for w in basic_tokenize(text, self.lower)]

    def save(self, directory: str | Path) -> None:
        """Write ``vocab.txt`` (one token per line, line number = id; HF format)."""
        self._write_vocab(Path(directory))

    @classmethod
    def load(cls, path: str | Path) -> "WordTokenizer":
        """Load from a directory holding vocab.txt, or from the vocab.txt path itself."""
        p = Path(path)
        return cls(read_vocab_file(p / "vocab.txt" if p.is_dir() else p))


# ---------------------------------------------------------------- WordPiece
def _new_wordpiece_tokenizer(vocab: dict[str, int] | None, lowercase: bool):
    model = WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100) if vocab else WordPiece(unk_token=UNK)
    tk = Tokenizer(model)
    tk.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                               strip_accents=None, lowercase=lowercase)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece(prefix="##")
    return tk


def _finish(tk) -> None:
    tk.add_special_tokens(SPECIAL_TOKENS)
    cls_id, sep_id = tk.token_to_id(CLS), tk.token_to_id(SEP)
    tk.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)])


class WordPieceTokenizer(TokenizerBase):
    """BERT WordPiece (BertNormalizer + BertPreTokenizer + WordPiece with ``##`` continuations),
    built on the ``tokenizers`` library."""

    kind = "wordpiece"

    def __init__(self, tk):
        self._tk = tk
        v = tk.get_vocab(with_added_tokens=True)
        self.vocab = [None] * len(v)  # type: ignore[list-item]
        for t, i in v.items():
            if not 0 <= i < len(v) or self.vocab[i] is not None:
                raise TokenizerError(Message("WordPiece vocabulary ids are not contiguous; rebuild the tokenizer"))
            self.vocab[i] = t
        self.token_to_id = dict(v)
        self._init_specials()

    @classmethod
    def train(cls, texts: Iterable[str] | Callable[[], Iterable[str]], vocab_size: int = 1000,
              min_frequency: int = 2) -> "WordPieceTokenizer":
        """Train a WordPiece vocabulary on ``texts`` (specials get ids 0..4); the same texts always give the
        same vocabulary (bertcore.data.wordpiece_training). ``texts`` is read twice: give a list, or a
        function that returns a fresh iterator over a corpus too large to hold."""
        if not isinstance(vocab_size, int) or vocab_size < len(SPECIAL_TOKENS) + 1:
            raise TokenizerError(Message("vocab_size={value} is too small; use at least {least}",
                                         value=repr(vocab_size), least=len(SPECIAL_TOKENS) + 1))
        if not isinstance(min_frequency, int) or min_frequency < 0:
            raise TokenizerError(Message("min_frequency={value} must be a whole number >= 0",
                                         value=repr(min_frequency)))
        if not callable(texts):
            if iter(texts) is texts:
                raise TypeError("WordPieceTokenizer.train reads the texts twice: pass a list or a function that "
                                "returns a new iterator, not a one-shot iterator")
            texts = functools.partial(iter, texts)
        vocab = train_vocab(lambda: _new_wordpiece_tokenizer(None, True), texts, vocab_size, min_frequency)
        if vocab is None:
            raise TokenizerError(Message("cannot train WordPiece on empty text; give a corpus with some words"))
        tk = _new_wordpiece_tokenizer(vocab, True)
        _finish(tk)
        return cls(tk)

    @classmethod
    def from_vocab_file(cls, path: str | Path, lowercase: bool = True) -> "WordPieceTokenizer":
        """Load an HF ``vocab.txt`` (e.g. all-MiniLM-L6-v2's); ids equal transformers' BertTokenizer."""
        vocab = read_vocab_file(path)
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise TokenizerError(Message("vocab file {path} lacks special token(s) {missing}; a BERT vocab.txt must "
                                         "hold {specials}", path=path, missing=missing,
                                         specials=", ".join(SPECIAL_TOKENS)))
        tk = _new_wordpiece_tokenizer({t: i for i, t in enumerate(vocab)}, lowercase)
        _finish(tk)
        return cls(tk)

    @classmethod
    def from_file(cls, path: str | Path) -> "WordPieceTokenizer":
        try:
            tk = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on bad JSON
            raise TokenizerError(Message("cannot load tokenizer {path}: {err}; it must be a tokenizers tokenizer.json",
                                         path=path, err=str(e))) from None
        return cls(tk)

    def tokenize(self, text: str) -> list[str]:
        return self._tk.encode(text, add_special_tokens=False).tokens

    def _encode(self, text: str) -> list[int]:
        return self._tk.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``encode`` for many texts at once (the tokenizers library spreads them over its threads)."""
        return [e.ids for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]

    def word_pieces(self, text: str) -> list[tuple[str, list[str]]]:
        """Each word of ``text`` (after normalization) with the pieces WordPiece split it into."""
        enc = self._tk.encode(text, add_special_tokens=False)
        groups: list[tuple[object, int, int, list[str]]] = []
        for k, (tok, wid, (s, e)) in enumerate(zip(enc.tokens, enc.word_ids, enc.offsets)):
            key = ("tok", k) if wid is None else wid
            if groups and groups[-1][0] == key:
                groups[-1] = (key, groups[-1][1], e, groups[-1][3] + [tok])
            else:
                groups.append((key, s, e, [tok]))
        norm = self._tk.normalizer
        out = []
        for _, s, e, pieces in groups:
            word = text[s:e]
            out.append((word if word in SPECIAL_TOKENS or norm is None else norm.normalize_str(word), pieces))
        return out

    def unknown_words(self, text: str) -> list[str]:
        return [w for w, pieces in self.word_pieces(text) if UNK in pieces and w != UNK]

    def save(self, directory: str | Path) -> None:
        """Write ``tokenizer.json`` (tokenizers format) and ``vocab.txt`` (HF format)."""
        d = Path(directory)
        self._write_vocab(d)
        self._tk.save(str(d / "tokenizer.json"))


def canonical_kind(kind):
    """Today's name of tokenizer kind ``kind`` (``LEGACY_KINDS``: "seed_word" -> "bert_pytorch"); any other value,
    a tokenizer object or None included, unchanged, so an unknown name is still refused where it is checked."""
    return LEGACY_KINDS.get(kind, kind) if isinstance(kind, str) else kind


def unknown_kind(kind) -> TokenizerError:
    """The error for a tokenizer kind this version does not know, naming the ones it does."""
    return TokenizerError(Message("tokenizer kind {kind} is unknown; use one of {kinds}", kind=repr(kind),
                                  kinds=", ".join(map(repr, TOKENIZER_KINDS))))


def load_tokenizer(directory: str | Path, kind: str | None = None):
    """Load a tokenizer saved by ``save``. The kind is ``kind``, else the ``tokenizer_kind`` key of config.json /
    tokenizer_config.json, else guessed: tokenizer.json -> WordPiece; a vocab.txt with ``##`` pieces ->
    WordPiece, one starting with BERT-pytorch's ``<pad> <unk> <eos> <sos> <mask>`` -> bert_pytorch; else
    word-level. An older kind name (``LEGACY_KINDS``) is read as today's, given or recorded."""
    d = Path(directory)
    if not d.is_dir():
        raise TokenizerError(Message("tokenizer directory {path} does not exist; pass the folder holding vocab.txt",
                                     path=d))
    kind = canonical_kind(kind)
    if kind is not None and kind not in TOKENIZER_KINDS:
        raise unknown_kind(kind)
    if kind is None:
        for name in ("config.json", "tokenizer_config.json"):
            try:
                k = canonical_kind(json.loads((d / name).read_text(encoding="utf-8")).get("tokenizer_kind"))
            except (OSError, ValueError, AttributeError):
                continue
            if k is not None and k not in TOKENIZER_KINDS:
                raise TokenizerError(Message("{path} names tokenizer_kind {kind}, which this version cannot read; "
                                             "it knows {kinds}", path=d / name, kind=repr(k),
                                             kinds=", ".join(map(repr, TOKENIZER_KINDS))))
            if k is not None:
                kind = k
                break
    if (d / "tokenizer.json").is_file() and kind in (None, "wordpiece"):
        return WordPieceTokenizer.from_file(d / "tokenizer.json")
    if not (d / "vocab.txt").is_file():
        raise TokenizerError(Message("{path} holds neither tokenizer.json nor vocab.txt; save a tokenizer there "
                                     "first", path=d))
    vocab = read_vocab_file(d / "vocab.txt")
    if kind == "bert_pytorch" or (kind is None and vocab[:len(BERT_PYTORCH_SPECIALS)] == list(BERT_PYTORCH_SPECIALS)):
        return BertPytorchTokenizer(vocab)
    if kind == "wordpiece" or (kind is None and any(t.startswith("##") for t in vocab)):
        return WordPieceTokenizer.from_vocab_file(d / "vocab.txt")
    return WordTokenizer(vocab)
