"""Labelled token sets for probing classifiers (Alain & Bengio 2016; Hewitt & Liang 2019, §2-3).

A probe set is a list of input sequences (``[CLS] words [SEP]`` as token ids, each word tokenized on its own so
that the first piece of every word is known) and a list of *items*: one token of one sequence with its label
and its *type* (the word the control task keys on). The split into training and held-out items is by sentence
(``random.Random(seed)``), so a held-out sentence is never seen while fitting.

Properties from the built-in grammar (``bertcore.data.corpus.labelled_sentences``, ground truth known):

* ``position``: the token's index in its sequence, at every token ([CLS] = 0). Any vocabulary, any model.
* ``number``: the subject's number (sg / pl) at the verb, with the verb replaced by [MASK] (the verb's own
  form would give the answer away at layer 0: the number has to come from the subject, as in MLM, BERT §3.1).
* ``topic``: the sentence's topic (one of 10) at [CLS].
* ``category``: the word's category from the grammar's lexicon (noun, verb, determiner, ...), at the first
  piece of each word whose category does not depend on the sentence (``bertcore.data.corpus.word_categories``).
* ``context_topic``: the sentence's topic (one of 10) at the first piece of every word that belongs to no topic's
  lexicon (determiners, prepositions, generic verbs, the full stop): a token label that only context gives, like
  the named-entity tags of BERT Table 8's feature-based column. A left-to-right model sees only the words before.

The control task (Hewitt & Liang 2019, §3) gives each *type* a random label drawn from the property's own label
distribution. The type is the token itself; at [CLS] (topic) it is the subject's head word and at a masked verb
it is the verb the mask hides, the word the label is about.

User labels (``labels_from_csv``), a UTF-8 CSV with a header ``text,labels``::

    text,labels
    the cat sat .,DET NOUN VERB PUNCT
    two dogs ran .,DET NOUN VERB PUNCT

``text`` is split at whitespace into words and ``labels`` holds one label per word, separated by spaces; ``_``
leaves a word out. Each word is probed at its first token. ``position`` can use the CSV's texts as well.
"""
from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass, field

from bertcore.data.corpus import TOPICS, LabelledSentence, labelled_sentences, word_categories
from bertcore.errors import InputError
from bertcore.message import Message

GRAMMAR_PROPERTIES = {
    "position": "the token's position in the sequence ([CLS] = 0), at every token",
    "number": "the subject's number (sg/pl) at the verb, with the verb masked",
    "topic": "the sentence's topic (10 topics) at [CLS]",
    "category": "the word's category in the grammar's lexicon (noun, verb, determiner, ...)",
    "context_topic": "the sentence's topic at every word no topic's lexicon holds (the, in, generic verbs, .)",
}
CSV_PROPERTY = "labels"  # the labels of a user's CSV
PROPERTIES = (*GRAMMAR_PROPERTIES, CSV_PROPERTY)
N_SENTENCES = 600
TEST_FRACTION = 0.25
MAX_UNKNOWN = 0.10  # grammar properties need a vocabulary that covers the grammar's words
MAX_CSV_ROWS = 5000
SKIP = "_"


@dataclass
class ProbeSet:
    """Sequences of token ids and the probed items: ``(sequence, position)`` with a label and a control type."""
    prop: str
    sequences: list[list[int]]
    items: list[tuple[int, int]]
    labels: list[str]
    types: list[str]
    test_sequences: set[int] = field(default_factory=set)
    note: str = ""

    def is_test(self) -> list[bool]:
        return [s in self.test_sequences for s, _ in self.items]


def split_sequences(n: int, seed: int, fraction: float = TEST_FRACTION) -> set[int]:
    """The held-out sequence indices: a seeded ``fraction`` of ``range(n)`` (at least 1, never all)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    k = min(max(1, round(n * fraction)), n - 1)
    return set(order[:k])


def _word_pieces(tokenizer, word: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))


def _encode_words(tokenizer, words, max_len: int, mask: int | None = None) -> tuple[list[int], list[int | None]]:
    """``[CLS] pieces of each word [SEP]`` (word ``mask`` becomes one [MASK]); the first-piece index of each word
    (None: no pieces, or cut off by ``max_len``)."""
    ids = [tokenizer.cls_id]
    first: list[int | None] = []
    for i, w in enumerate(words):
        pieces = [tokenizer.mask_id] if i == mask else _word_pieces(tokenizer, w)
        if not pieces or len(ids) + len(pieces) >= max_len:
            first.append(None)
            if pieces:
                break
            continue
        first.append(len(ids))
        ids.extend(pieces)
    first += [None] * (len(words) - len(first))
    return ids + [tokenizer.sep_id], first


def _unknown_share(tokenizer, sentences: list[LabelledSentence]) -> float:
    words = [w for s in sentences for w in s.words]
    unk = sum(tokenizer.unk_id in _word_pieces(tokenizer, w) for w in words)
    return unk / max(1, len(words))


def grammar_probe_set(tokenizer, prop: str, max_len: int = 64, seed: int = 0, n: int = N_SENTENCES) -> ProbeSet:
    """The probe set of a built-in property (module docstring) for ``tokenizer``'s vocabulary."""
    if prop not in GRAMMAR_PROPERTIES:
        raise InputError(Message("property {prop} is unknown; choose one of {props} ({csv} needs a labels CSV)",
                                 prop=repr(prop), props=", ".join(PROPERTIES), csv=repr(CSV_PROPERTY)))
    sentences = labelled_sentences(seed, n)
    if prop != "position":
        share = _unknown_share(tokenizer, sentences)
        if share > MAX_UNKNOWN:
            raise InputError(Message("this model's vocabulary does not cover the built-in grammar's words ({share} of "
                                     "them are {unk}), so {prop} cannot be probed; use 'position' or give your own "
                                     "token labels in a CSV (text,labels)", share=f"{share:.0%}",
                                     unk=tokenizer.unk_token, prop=repr(prop)))
    cats = word_categories() if prop == "category" else {}
    topical = topic_words() if prop == "context_topic" else set()
    out = ProbeSet(prop, [], [], [], [])
    for si, s in enumerate(sentences):
        ids, first = _encode_words(tokenizer, s.words, max_len, mask=s.verb if prop == "number" else None)
        out.sequences.append(ids)
        if prop == "position":
            toks = tokenizer.convert_ids_to_tokens(ids)
            for p, t in enumerate(toks):
                _add(out, si, p, str(p), t)
        elif prop == "number" and first[s.verb] is not None:
            _add(out, si, first[s.verb], s.number, s.words[s.verb].lower())
        elif prop == "topic":
            _add(out, si, 0, s.topic, s.words[s.subject].lower())
        elif prop == "category":
            for w, p in zip(s.words, first):
                if p is not None and w.lower() in cats:
                    _add(out, si, p, cats[w.lower()], w.lower())
        elif prop == "context_topic":
            for w, p in zip(s.words, first):
                if p is not None and w.lower() not in topical:
                    _add(out, si, p, s.topic, w.lower())
    out.test_sequences = split_sequences(len(out.sequences), seed)
    return out


def topic_words() -> set[str]:
    """Every lower-case word of any topic's lexicon (people, names, adjectives, places, food, ...)."""
    out: set[str] = set()

    def add(v) -> None:
        if isinstance(v, str):
            out.update(v.lower().split())
        elif isinstance(v, dict):
            for k in v:
                add(k)
        elif isinstance(v, (list, tuple)):
            for x in v:
                add(x)

    for lex in TOPICS.values():
        for key, v in lex.items():
            add([verb for verb, _ in v] if key == "topic_verbs" else v)  # (verb, what it takes): the verb only
    return out


def _add(ps: ProbeSet, seq: int, pos: int, label: str, typ: str) -> None:
    ps.items.append((seq, pos))
    ps.labels.append(label)
    ps.types.append(typ)


def labels_from_csv(data: bytes, name: str = "labels CSV") -> list[tuple[list[str], list[str]]]:
    """``[(words, labels), ...]`` from a ``text,labels`` CSV (module docstring); InputError says what to fix."""
    try:
        text = bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(Message("{name} is not UTF-8 text; save it as UTF-8 CSV", name=name)) from None
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise InputError(Message("{name} is empty; write a header 'text,labels' and one sentence per row", name=name))
    head = [c.strip().lower() for c in rows[0]]
    if head[:2] != ["text", "labels"]:
        raise InputError(Message("{name} must start with the header 'text,labels' (got {got}); each row then holds a "
                                 "sentence and one label per word, separated by spaces", name=name,
                                 got=repr(",".join(rows[0])[:60])))
    out = []
    for no, r in enumerate(rows[1:], 2):
        if len(r) < 2:
            raise InputError(Message("{name} row {no} has no labels column; write 'text,labels' (quote a text with "
                                     "commas)", name=name, no=no))
        words, labels = r[0].split(), r[1].split()
        if not words:
            raise InputError(Message("{name} row {no} has an empty text", name=name, no=no))
        if len(words) != len(labels):
            raise InputError(Message("{name} row {no} has {n_words} word(s) but {n_labels} label(s); give one label "
                                     "per whitespace-separated word ('{skip}' leaves a word out)", name=name, no=no,
                                     n_words=len(words), n_labels=len(labels), skip=SKIP))
        out.append((words, labels))
    if len(out) < 4:
        raise InputError(Message("{name} has {n} sentence(s); give at least 4 so that some can be held out",
                                 name=name, n=len(out)))
    if len(out) > MAX_CSV_ROWS:
        raise InputError(Message("{name} has {n} sentences; use at most {limit}", name=name, n=len(out),
                                 limit=MAX_CSV_ROWS))
    if len({lb for _, ls in out for lb in ls if lb != SKIP}) < 2:
        raise InputError(Message("{name} uses fewer than 2 different labels; a probe needs at least 2 classes",
                                 name=name))
    return out


def csv_probe_set(tokenizer, rows: list[tuple[list[str], list[str]]], prop: str = CSV_PROPERTY, max_len: int = 64,
                  seed: int = 0) -> ProbeSet:
    """The CSV's own labels (``prop='labels'``) or token positions (``prop='position'``) over its texts."""
    if prop not in (CSV_PROPERTY, "position"):
        raise InputError(Message("with a labels CSV the property is {csv} (its labels) or 'position', not {prop}",
                                 csv=repr(CSV_PROPERTY), prop=repr(prop)))
    out = ProbeSet(prop, [], [], [], [])
    cut = 0
    for si, (words, labels) in enumerate(rows):
        ids, first = _encode_words(tokenizer, words, max_len)
        out.sequences.append(ids)
        if prop == "position":
            for p, t in enumerate(tokenizer.convert_ids_to_tokens(ids)):
                _add(out, si, p, str(p), t)
            continue
        for w, lb, p in zip(words, labels, first):
            if lb != SKIP and p is not None:
                _add(out, si, p, lb, w.lower())
            cut += lb != SKIP and p is None
    if cut:
        out.note = f"{cut} word(s) had no tokens or lay beyond {max_len} tokens and were left out"
    out.test_sequences = split_sequences(len(out.sequences), seed)
    return out
