"""Example texts a page pre-fills, in words the active model's vocabulary knows.

A page's defaults are lowercase prose with punctuation split off (Predict: "the cows [MASK] the hay near the
barn ."). A word-level or WordPiece vocabulary reads them; BERT-pytorch's seed vocabulary (tokenizer ``seed_word``) splits
on whitespace and keeps case, so most of them would be ``<unk>``. For such a vocabulary the examples are taken
from a corpus it knows instead (``bertcore.analysis.live_probe.default_probe``: one word masked, a true pair).
"""
from __future__ import annotations

from dataclasses import dataclass

from bertcore.analysis.live_probe import default_probe
from bertcore.errors import BertcoreError
from explorer import corpus_state as cs
from explorer import workspace


@dataclass(frozen=True)
class Examples:
    masked: str  # a text with one [MASK] (fill-mask)
    sentence: str  # a sentence whose words the user clicks to mask
    a: str  # an NSP pair
    b: str


_SCORED_PAIRS = 200  # how much of a corpus is read to see whether the vocabulary knows it


def unknown_count(tokenizer, texts) -> int:
    """How many words of ``texts`` the tokenizer maps to its unknown token."""
    return sum(len(tokenizer.unknown_words(t)) for t in texts)


def known_examples(tokenizer, defaults: Examples, corpora=()) -> Examples:
    """``defaults`` unless ``tokenizer`` is a seed vocabulary that lacks some of their words; then examples from
    the candidate corpus whose first pairs it knows best (ties: the first given), or ``defaults`` when no corpus
    gives examples it fully knows."""
    def unknown(ex: Examples) -> int:
        return unknown_count(tokenizer, (ex.masked.replace("[MASK]", " "), ex.sentence, ex.a, ex.b))

    if getattr(tokenizer, "kind", None) != "seed_word" or unknown(defaults) == 0:
        return defaults
    scored = []
    for i, corpus in enumerate(c for c in corpora if c is not None and getattr(c, "pairs", None)):
        pairs = corpus.pairs[:_SCORED_PAIRS]
        words = sum(len(tokenizer.words(s)) if hasattr(tokenizer, "words") else len(s.split())
                    for p in pairs for s in p)
        scored.append((unknown_count(tokenizer, (s for p in pairs for s in p)) / max(words, 1), i, corpus))
    for _, _, corpus in sorted(scored, key=lambda x: x[:2]):
        try:
            probe = default_probe(corpus, tokenizer)
        except BertcoreError:
            continue
        ex = Examples(probe.text, probe.a, probe.a, probe.b)
        if unknown(ex) == 0:
            return ex
    return defaults


def session_examples(tokenizer, defaults: Examples) -> Examples:
    """``known_examples`` over the corpora this session can name: the Data & tokens choice, the tutorial two-liner
    and the built-in corpus (shared, already built). Only a seed vocabulary reads them."""
    if getattr(tokenizer, "kind", None) != "seed_word":
        return defaults
    corpora = [cs.active().corpus, cs.tutorial_choice().corpus, workspace.shared_corpus_and_tokenizer()[0]]
    return known_examples(tokenizer, defaults, corpora)
