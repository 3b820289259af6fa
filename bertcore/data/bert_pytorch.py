"""BERT-pytorch's (codertimo) data format, as seed 003 walks through it, so its worked example can be reproduced.

* Vocabulary: ``<pad> <unk> <eos> <sos> <mask>`` (ids 0-4), then the corpus words split on whitespace, case
  kept, by descending frequency and alphabetically within a frequency.
* Input: ``<sos> A <eos> B <eos>``, segment labels 1 for ``<sos> A <eos>``, 2 for ``B <eos>``, fixed padding
  with 0 to ``seq_len`` (20 in the tutorial); the padding mask is ``(x > 0)``.
* MLM target: the original id at each selected position, 0 elsewhere (0 = <pad>, ignored by the loss).

The project's own pipeline (bertcore.data.pretraining) lowercases, uses [PAD] [UNK] [CLS] [SEP] [MASK] and pads
dynamically; this module exists so the pages can show the seed's numbers exactly.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch

from bertcore.errors import InputError

SPECIALS = ("<pad>", "<unk>", "<eos>", "<sos>", "<mask>")
PAD, UNK, EOS, SOS, MASK = range(5)


def seed_vocab(pairs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """word -> id as BERT-pytorch's WordVocab builds it from tab-separated (A, B) lines."""
    counts = Counter(w for a, b in pairs for w in (a.split() + b.split()))
    words = sorted(counts, key=lambda w: (-counts[w], w))  # by frequency, then alphabetically (case-sensitive)
    return {w: i for i, w in enumerate(list(SPECIALS) + words)}


def to_ids(sentence: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.get(w, UNK) for w in sentence.split()]


def build_example(a_ids: list[int], a_label: list[int], b_ids: list[int], b_label: list[int],
                  seq_len: int = 20) -> dict[str, list[int]]:
    """BERT-pytorch's ``__getitem__`` after masking: bert_input, bert_label, segment_label, padded to ``seq_len``,
    and the padding mask (x > 0)."""
    if seq_len < 3:
        raise InputError(f"seq_len={seq_len} cannot hold <sos> and two <eos>; use at least 3")
    t1, t2 = [SOS, *a_ids, EOS], [*b_ids, EOS]
    l1, l2 = [PAD, *a_label, PAD], [*b_label, PAD]
    seg = ([1] * len(t1) + [2] * len(t2))[:seq_len]
    x = (t1 + t2)[:seq_len]
    y = (l1 + l2)[:seq_len]
    pad = [PAD] * (seq_len - len(x))
    x, y, seg = x + pad, y + pad, seg + pad
    return {"bert_input": x, "bert_label": y, "segment_label": seg, "mask": [int(v > 0) for v in x]}


def random_word(sentence: str, vocab: dict[str, int], generator: torch.Generator, p: float = 0.15,
                mask_frac: float = 0.8, random_frac: float = 0.1) -> tuple[list[int], list[int]]:
    """The seed's ``random_word`` with a seeded generator: each word is selected with probability p (no
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


def seed003_example() -> dict:
    """Seed 003's worked example on its two-line corpus: 'Welcome to the' / 'the jungle' with 'Welcome' -> <mask>
    and 'jungle' -> the random id 10, padded to 20. Returns the vocabulary, the unmasked ids and the four lists."""
    pairs = [("Welcome to the", "the jungle"), ("I can stay", "here all night")]
    vocab = seed_vocab(pairs)
    a, b = to_ids(pairs[0][0], vocab), to_ids(pairs[0][1], vocab)
    a_masked, a_label = [MASK, *a[1:]], [a[0]] + [PAD] * (len(a) - 1)
    b_masked, b_label = [b[0], 10], [PAD, b[1]]
    return {"vocab": vocab, "a_ids": a, "b_ids": b, **build_example(a_masked, a_label, b_masked, b_label, 20)}
