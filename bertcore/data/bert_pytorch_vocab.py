"""BERT-pytorch's (codertimo) data format, as the BERT-pytorch tutorials (``../shared/seeds`` 000 and 003) write
it: its vocabulary as a tokenizer, and the worked example of tutorial 003.

* Vocabulary (``WordVocab``): ``<pad> <unk> <eos> <sos> <mask>`` (ids 0-4), then the corpus words split on
  whitespace, case kept, by descending frequency and alphabetically within a frequency (``word_vocab``).
* Input: ``<sos> A <eos> B <eos>``, segment labels 1 for ``<sos> A <eos>``, 2 for ``B <eos>``, fixed padding
  with 0 to ``seq_len`` (20 in the tutorial); the padding mask is ``(x > 0)``.
* MLM target: the original id at each selected position, 0 elsewhere (0 = <pad>, ignored by the loss).

``BertPytorchTokenizer`` (kind "bert_pytorch"; ``bertcore.data.tokenization.canonical_kind`` reads the older
name that runs saved before it recorded) is that vocabulary behind the project's tokenizer interface, so the
project's pipeline (bertcore.data.pretraining) trains on it: the roles map cls -> ``<sos>``, sep -> ``<eos>``, so
``build_pair`` writes ``<sos> A <eos> B <eos>`` with the tutorial's ids. Text typed with the project's
``[MASK] [CLS] [SEP] [PAD] [UNK]`` means the tutorial's tokens of the same role. The other functions rebuild
tutorial 003's example outside the pipeline, so the pages can show the tutorial's numbers exactly.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from bertcore.data.tokenizer_base import SPECIAL_TOKENS, TokenizerBase, read_vocab_file
from bertcore.errors import InputError, TokenizerError
from bertcore.message import Message

SPECIALS = ("<pad>", "<unk>", "<eos>", "<sos>", "<mask>")  # in id order
PAD, UNK, EOS, SOS, MASK = range(5)
ROLE_TOKENS = ("<pad>", "<unk>", "<sos>", "<eos>", "<mask>")  # in SPECIAL_TOKENS' role order: pad unk cls sep mask
_TYPED = {**dict(zip(SPECIAL_TOKENS, ROLE_TOKENS)), **{t: t for t in ROLE_TOKENS}}
_TYPED_RE = re.compile("(" + "|".join(re.escape(t) for t in _TYPED) + ")")


def bert_pytorch_words(text: str) -> list[str]:
    """BERT-pytorch's words of ``text``: split on whitespace, case kept. A typed special token, in either spelling
    (``[MASK]`` or ``<mask>``), is cut out as the tutorial's token of that role, even when glued to a word."""
    if not isinstance(text, str):
        raise TokenizerError(f"expected text as str, got {type(text).__name__}; pass a Python string")
    out: list[str] = []
    for i, part in enumerate(_TYPED_RE.split(text)):
        if i % 2:
            out.append(_TYPED[part])
        elif part:
            out.extend(part.split())
    return out


def vocab_order(texts: Iterable[str]) -> list[str]:
    """BERT-pytorch's ``WordVocab`` token list: the specials, then every word by frequency (descending), ties
    alphabetical (case-sensitive); a special typed in the corpus is not counted (torchtext drops them too)."""
    counts = Counter(w for t in texts for w in bert_pytorch_words(t) if w not in _TYPED)
    return list(SPECIALS) + sorted(counts, key=lambda w: (-counts[w], w))


def word_vocab(pairs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """word -> id as BERT-pytorch's WordVocab builds it from tab-separated (A, B) lines."""
    return {w: i for i, w in enumerate(vocab_order(s for a, b in pairs for s in (a, b)))}


class BertPytorchTokenizer(TokenizerBase):
    """BERT-pytorch's vocabulary (``vocab_order``) as a project tokenizer: whitespace words, case kept, unknown
    words -> ``<unk>``; specials ``<pad> <unk> <eos> <sos> <mask>`` at ids 0-4."""

    kind = "bert_pytorch"

    def __init__(self, vocab: list[str]):
        self.vocab = list(vocab)
        if self.vocab[:len(SPECIALS)] != list(SPECIALS):
            raise TokenizerError(Message("a BERT-pytorch vocabulary starts with {specials} (ids 0-4), this one with "
                                         "{first}; rebuild it with BertPytorchTokenizer.build",
                                         specials=" ".join(SPECIALS), first=" ".join(self.vocab[:len(SPECIALS)])))
        self.token_to_id = {t: i for i, t in enumerate(self.vocab)}
        if len(self.token_to_id) != len(self.vocab):
            raise TokenizerError(Message("vocabulary has duplicate tokens; each token must appear once"))
        self._init_specials(ROLE_TOKENS)

    @classmethod
    def build(cls, texts: Iterable[str]) -> "BertPytorchTokenizer":
        vocab = vocab_order(texts)
        if len(vocab) == len(SPECIALS):
            raise TokenizerError(Message("the corpus has no words to build a vocabulary from; give a corpus with some "
                                         "text"))
        return cls(vocab)

    def words(self, text: str) -> list[str]:
        return bert_pytorch_words(text)

    def tokenize(self, text: str) -> list[str]:
        known = self.token_to_id
        return [w if w in known else SPECIALS[UNK] for w in bert_pytorch_words(text)]

    def _encode(self, text: str) -> list[int]:
        get = self.token_to_id.get
        return [get(w, UNK) for w in bert_pytorch_words(text)]

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` that map to <unk> (in order, repeats kept)."""
        return [w for w in bert_pytorch_words(text) if w not in self.token_to_id]

    def word_pieces(self, text: str) -> list[tuple[str, list[str]]]:
        return [(w, [t]) for w, t in zip(bert_pytorch_words(text), self.tokenize(text))]

    def save(self, directory: str | Path) -> None:
        """Write ``vocab.txt`` (one token per line, line number = id); config.json records kind "bert_pytorch"."""
        self._write_vocab(Path(directory))

    @classmethod
    def load(cls, path: str | Path) -> "BertPytorchTokenizer":
        p = Path(path)
        return cls(read_vocab_file(p / "vocab.txt" if p.is_dir() else p))


def to_ids(sentence: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.get(w, UNK) for w in sentence.split()]


def build_example(a_ids: list[int], a_label: list[int], b_ids: list[int], b_label: list[int],
                  seq_len: int = 20) -> dict[str, list[int]]:
    """BERT-pytorch's ``__getitem__`` after masking: bert_input, bert_label, segment_label, padded to ``seq_len``,
    and the padding mask (x > 0)."""
    if seq_len < 3:
        raise InputError(Message("seq_len={seq_len} cannot hold <sos> and two <eos>; use at least 3", seq_len=seq_len))
    t1, t2 = [SOS, *a_ids, EOS], [*b_ids, EOS]
    l1, l2 = [PAD, *a_label, PAD], [*b_label, PAD]
    seg = ([1] * len(t1) + [2] * len(t2))[:seq_len]
    x = (t1 + t2)[:seq_len]
    y = (l1 + l2)[:seq_len]
    pad = [PAD] * (seq_len - len(x))
    x, y, seg = x + pad, y + pad, seg + pad
    return {"bert_input": x, "bert_label": y, "segment_label": seg, "mask": [int(v > 0) for v in x]}


def random_word(sentence: str, vocab: dict[str, int], generator, p: float = 0.15,
                mask_frac: float = 0.8, random_frac: float = 0.1) -> tuple[list[int], list[int]]:
    """BERT-pytorch's ``random_word`` with a seeded generator: each word is selected with probability p (no
    at-least-one rule); selected -> <mask> (80%), a random id from the whole vocabulary (10%) or kept (10%)."""
    ids, labels = [], []
    for w in sentence.split():
        orig = vocab.get(w, UNK)
        u, v = torch.rand(2, generator=generator).tolist()
        if u < p:
            if v < mask_frac:
                ids.append(MASK)
            elif v < mask_frac + random_frac:
                ids.append(int(torch.randint(len(vocab), (1,), generator=generator)))
            else:
                ids.append(orig)
            labels.append(orig)
        else:
            ids.append(orig)
            labels.append(PAD)
    return ids, labels


def bert_pytorch_example() -> dict:
    """Tutorial 003's worked example on its two-line corpus: 'Welcome to the' / 'the jungle' with 'Welcome' -> <mask>
    and 'jungle' -> the random id 10, padded to 20. Returns the vocabulary, the unmasked ids and the four lists."""
    pairs = [("Welcome to the", "the jungle"), ("I can stay", "here all night")]
    vocab = word_vocab(pairs)
    a, b = to_ids(pairs[0][0], vocab), to_ids(pairs[0][1], vocab)
    a_masked, a_label = [MASK, *a[1:]], [a[0]] + [PAD] * (len(a) - 1)
    b_masked, b_label = [b[0], 10], [PAD, b[1]]
    return {"vocab": vocab, "a_ids": a, "b_ids": b, **build_example(a_masked, a_label, b_masked, b_label, 20)}
