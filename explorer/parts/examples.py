"""Example texts a page pre-fills, in words the active model's vocabulary knows.

A page's defaults are lowercase prose with punctuation split off (Predict: "the cows [MASK] the hay near the
barn ."). A word-level or WordPiece vocabulary reads them; the BERT-pytorch tutorial's vocabulary (tokenizer
``bert_pytorch``) splits on whitespace and keeps case, so most of them would be ``<unk>``. For such a vocabulary the
examples are taken from a corpus it knows instead (``bertcore.analysis.live_probe.default_probe``: one word masked,
a true pair).
A model whose vocabulary knows fewer than half of the default words gets a Chinese corpus's example when it knows
one (a model trained on Chinese); otherwise the defaults stay, [UNK]s and all, as the user's own starting point.

The defaults follow the app's language: with 简体中文 (``explorer.i18n.language() == "zh"``) a model whose
vocabulary knows every character of a Chinese corpus's example (this session's corpus when it is Chinese, else
the built-in Chinese grammar) gets that example; any other model keeps the English defaults.
"""
from __future__ import annotations

from dataclasses import dataclass

from bertcore.analysis.live_probe import default_probe
from bertcore.data.tokenization import has_cjk
from bertcore.errors import BertcoreError
from explorer.session import corpus_state as cs
from explorer.session import workspace
from explorer.i18n import language


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


def _words(tokenizer, text: str) -> int:
    return len(tokenizer.words(text)) if hasattr(tokenizer, "words") else len(text.split())


def mostly_known(tokenizer, texts) -> bool:
    """Fewer than half of the words of ``texts`` are unknown to ``tokenizer``."""
    texts = [t.replace("[MASK]", " ") for t in texts]
    return 2 * unknown_count(tokenizer, texts) < sum(_words(tokenizer, t) for t in texts)


def _unknown(tokenizer, ex: Examples) -> int:
    return unknown_count(tokenizer, (ex.masked.replace("[MASK]", " "), ex.sentence, ex.a, ex.b))


def corpus_examples(corpus, tokenizer) -> Examples | None:
    """A corpus's own example (``default_probe``: a true pair, one word of A masked); Chinese without the spaces
    the probe puts between characters. None when the corpus gives none for this tokenizer."""
    try:
        probe = default_probe(corpus, tokenizer)
    except BertcoreError:
        return None
    masked = probe.text.replace(" ", "") if has_cjk(probe.text) else probe.text
    return Examples(masked, probe.a, probe.a, probe.b)


def known_examples(tokenizer, defaults: Examples, corpora=(), prefer=()) -> Examples:
    """The first of ``prefer`` (corpora of the session's language) whose example the tokenizer fully knows; else
    ``defaults`` unless ``tokenizer`` is a BERT-pytorch vocabulary that lacks some of their words, or any vocabulary
    that lacks half of them (then only a Chinese corpus is a candidate); then examples from the candidate corpus
    whose first pairs it knows best (ties: the first given), or ``defaults`` when no corpus gives examples it
    fully knows."""
    for corpus in prefer:
        ex = corpus_examples(corpus, tokenizer) if corpus is not None else None
        if ex is not None and _unknown(tokenizer, ex) == 0:
            return ex
    if _unknown(tokenizer, defaults) == 0:
        return defaults
    if getattr(tokenizer, "kind", None) != "bert_pytorch":  # only a Chinese corpus replaces them (see the module doc)
        if mostly_known(tokenizer, (defaults.masked, defaults.sentence, defaults.a, defaults.b)):
            return defaults
        corpora = [c for c in corpora if c is not None and getattr(c, "pairs", None) and has_cjk(c.pairs[0][0])]
    scored = []
    for i, corpus in enumerate(c for c in corpora if c is not None and getattr(c, "pairs", None)):
        pairs = corpus.pairs[:_SCORED_PAIRS]
        words = sum(_words(tokenizer, s) for p in pairs for s in p)
        scored.append((unknown_count(tokenizer, (s for p in pairs for s in p)) / max(words, 1), i, corpus))
    for _, _, corpus in sorted(scored, key=lambda x: x[:2]):
        ex = corpus_examples(corpus, tokenizer)
        if ex is not None and _unknown(tokenizer, ex) == 0:
            return ex
    return defaults


def session_examples(tokenizer, defaults: Examples) -> Examples:
    """``known_examples`` over the corpora this session can name: the Data & tokens choice, the tutorial two-liner
    and the built-in corpus (shared, already built); in 简体中文 the Chinese ones first."""
    zh = language() == "zh"
    if getattr(tokenizer, "kind", None) != "bert_pytorch" and not zh and _unknown(tokenizer, defaults) == 0:
        return defaults  # the common case costs one look at four short texts
    active = cs.active().corpus
    chinese = [active] if active is not None and active.pairs and has_cjk(active.pairs[0][0]) else []
    chinese.append(cs.builtin_zh_choice().corpus)
    corpora = [active, cs.tutorial_choice().corpus, workspace.shared_corpus_and_tokenizer()[0], chinese[-1]]
    return known_examples(tokenizer, defaults, corpora, prefer=chinese if zh else ())
