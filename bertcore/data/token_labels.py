"""What is true of each token of a corpus pair: the labels a sparse-autoencoder feature is named by
(``bertcore.analysis.features``).

For the built-in English grammar (``bertcore.data.corpus``) the pairs are drawn again from the corpus's seed with
:func:`labelled_pair`, so every word's role is known, not guessed. Each token gets the labels of its word:

=================  =======================================================================================
family             labels (``family:value``)
=================  =======================================================================================
``class``          noun, verb, determiner, adjective, preposition, pronoun, name, connective, punctuation
                   (the subject's words and the agreeing verb by their place in the frame; the other words
                   from the lexicon, ``word_categories``; a word of two classes elsewhere gets none)
``number``         subject_sg/pl (the subject's words: A's noun phrase, B's pronoun or noun), verb_sg/pl (the
                   verb that agrees with it), sentence_sg/pl (every word of a sentence with that subject)
``gender``         m / f: a person noun, a name or he/she of that gender
``topic``          the pair's topic, at every token of the sequence ([CLS] and [SEP] included)
``topic_word``     the topic whose lexicon holds the word (when exactly one does)
``sentence``       A ([CLS], A and its [SEP]) / B (B and its [SEP]): the token type
``special``        [CLS], [SEP], [MASK] (the token the model reads; a masked word keeps its word's labels)
``position``       the token's index in its sequence
``word``           the token the model reads: only for a corpus the grammar did not write (an upload)
=================  =======================================================================================
"""
from __future__ import annotations

import functools
import random
import re

from bertcore.data.corpus import NAMES, PEOPLE, TOPICS, Corpus, LabelledPair, labelled_pair, plural, word_categories
from bertcore.data.tokenization import basic_tokenize
from bertcore.message import Message

FAMILIES = ("class", "number", "gender", "topic", "topic_word", "sentence", "special", "position", "word")
PRONOUNS = {"he", "she", "it", "they"}
_BUILTIN = re.compile(r"^builtin\(seed=(\d+)\)$")


@functools.lru_cache(maxsize=8)
def labelled_head(seed: int, n: int) -> tuple[LabelledPair, ...]:
    """The first ``n`` distinct pairs the built-in grammar draws from ``seed``: the first ``n`` pairs of
    ``builtin_corpus(seed)``, with how each was made (its loop, repeats skipped)."""
    rng = random.Random(int(seed))
    seen: set = set()
    out: list[LabelledPair] = []
    tries = 0
    while len(out) < n and tries < 20 * n + 1000:
        tries += 1
        p = labelled_pair(rng)
        if (p.a, p.b) not in seen:
            seen.add((p.a, p.b))
            out.append(p)
    return tuple(out)


def builtin_head(seed: int, n: int) -> Corpus:
    """The first ``n`` pairs of the built-in corpus of ``seed`` (the same pairs, without drawing all 24,000)."""
    pairs = labelled_head(int(seed), int(n))
    return Corpus(f"builtin(seed={int(seed)})", [(p.a, p.b) for p in pairs], documents=[list(TOPICS).index(p.topic)
                                                                                         for p in pairs])


def grammar_pairs(corpus: Corpus | None, upto: int | None = None) -> list[LabelledPair] | None:
    """The first ``upto`` (default: all) labelled pairs of a built-in English corpus, in its order. None for any
    other corpus, or when a pair drawn again differs from the corpus's own."""
    m = _BUILTIN.match(getattr(corpus, "name", "") or "")
    if m is None:
        return None
    target = len(corpus.pairs) if upto is None else min(int(upto), len(corpus.pairs))
    out = list(labelled_head(int(m.group(1)), target))
    if len(out) != target or any((p.a, p.b) != tuple(q) for p, q in zip(out, corpus.pairs)):
        return None
    return out


def _lexicon_tables() -> tuple[dict, dict, set]:
    """{word: gender} of people, names and he/she; {word: topic} of words in exactly one topic's lexicon; the
    grammar's adjectives."""
    gender = {"he": "m", "she": "f"}
    for noun, g in PEOPLE.items():
        gender[noun] = gender[plural(noun)] = g
    for name, g in NAMES.items():
        gender[name.lower()] = g
    topics: dict[str, set] = {}
    adjs: set = {"fresh"}
    for t, lex in TOPICS.items():
        adjs |= set(lex["adjs"])
        words = [*lex["people"], *lex["names"], *lex["adjs"], *lex["places"], *lex["food"], *lex["animals"],
                 *lex["animal_food"], *lex["objects"], *lex["readables"], *lex["vehicles"], *lex["routes"],
                 *lex["animal_verbs"], *lex["vehicle_verbs"], *(v for v, _ in lex["topic_verbs"])]
        nouns = [*lex["people"], *lex["places"], *lex["food"], *lex["animals"], *lex["animal_food"], *lex["objects"],
                 *lex["readables"], *lex["vehicles"], *lex["routes"]]
        words += [plural(n) for n in nouns]
        for w in words:
            for part in basic_tokenize(w):
                topics.setdefault(part, set()).add(t)
    return gender, {w: next(iter(ts)) for w, ts in topics.items() if len(ts) == 1}, adjs


_TABLES: tuple | None = None


def _tables():
    global _TABLES
    if _TABLES is None:
        _TABLES = (*_lexicon_tables(), word_categories())
    return _TABLES


def _sentence_facts(words: list[str], subject: tuple[int, int], verb: int, number: str, subject_kind: str) -> list:
    """Labels of each word of one sentence; ``subject`` is the [start, end) span of its subject's words."""
    gender, topic_of, adjs, cats = _tables()
    out = []
    s0, s1 = subject
    for i, w in enumerate(words):
        labels = {f"number:sentence_{number}"}
        cls = cats.get(w)
        if s0 <= i < s1:
            labels.add(f"number:subject_{number}")
            if subject_kind == "name":
                cls = "name"
            elif subject_kind == "pronoun":
                cls = "pronoun"
            elif i == s0:
                cls = "determiner"
            else:
                cls = "adjective" if w in adjs and i < s1 - 1 else "noun"
        elif i == verb:
            labels.add(f"number:verb_{number}")
            cls = "verb"
        elif i < s0:
            cls = "connective"
        if cls:
            labels.add(f"class:{cls}")
        if w in gender:
            labels.add(f"gender:{gender[w]}")
        if w in topic_of:
            labels.add(f"topic_word:{topic_of[w]}")
        out.append(labels)
    return out


def pair_word_facts(p: LabelledPair) -> tuple[list[str], list[set], list[str], list[set]]:
    """(A's words, their labels, B's words, their labels) of one labelled pair (lower-cased, as the tokenizers
    split them)."""
    words_a, words_b = basic_tokenize(p.a), basic_tokenize(p.b)
    n_subj = len(basic_tokenize(p.subject))
    kind_a = "name" if p.subject in NAMES else "noun"
    n_conn = len(basic_tokenize(p.conn)) if p.conn else 0
    n_ref = len(basic_tokenize(p.ref_b))
    kind_b = "name" if p.ref_b in NAMES else "pronoun" if p.ref_b in PRONOUNS else "noun"
    facts_a = _sentence_facts(words_a, (0, n_subj), n_subj, p.number, kind_a)
    facts_b = _sentence_facts(words_b, (n_conn, n_conn + n_ref), n_conn + n_ref, p.number, kind_b)
    return words_a, facts_a, words_b, facts_b


def encode_words(tokenizer, words: list[str], facts: list[set]) -> tuple[list[int], list[set]] | None:
    """The token ids of ``words`` (each word tokenized on its own) with each token carrying its word's labels."""
    ids: list[int] = []
    out: list[set] = []
    for w, f in zip(words, facts):
        pieces = tokenizer.encode(w)
        ids += pieces
        out += [f] * len(pieces)
    return ids, out


_CLASS_NAMES = {"noun": Message("noun"), "verb": Message("verb"), "determiner": Message("determiner"),
                "adjective": Message("adjective"), "preposition": Message("preposition"),
                "pronoun": Message("pronoun"), "name": Message("name"), "connective": Message("connective"),
                "punctuation": Message("punctuation")}
_NUMBER_NAMES = {"subject_sg": Message("singular subject"), "subject_pl": Message("plural subject"),
                 "verb_sg": Message("verb of a singular subject"), "verb_pl": Message("verb of a plural subject"),
                 "sentence_sg": Message("in a sentence with a singular subject"),
                 "sentence_pl": Message("in a sentence with a plural subject")}

TOPIC_NAMES = {"kitchen": Message("kitchen"), "farm": Message("farm"), "school": Message("school"),
               "city": Message("city"), "sea": Message("sea"), "forest": Message("forest"),
               "hospital": Message("hospital"), "garden": Message("garden"), "space": Message("space"),
               "snow": Message("snow")}


def describe_label(label: str | None) -> str:
    """A label (``family:value``) in words, e.g. "number:subject_pl" -> "plural subject" (a Message, so the app
    translates it); "no label" for None."""
    if label is None:
        return Message("no label")
    fam, _, val = label.partition(":")
    if fam == "class" and val in _CLASS_NAMES:
        return _CLASS_NAMES[val]
    if fam == "number" and val in _NUMBER_NAMES:
        return _NUMBER_NAMES[val]
    if fam == "gender":
        return Message("masculine word") if val == "m" else Message("feminine word")
    if fam == "topic":
        return Message("topic: {topic}", topic=TOPIC_NAMES.get(val, val))
    if fam == "topic_word":
        return Message("a word of the {topic} topic", topic=TOPIC_NAMES.get(val, val))
    if fam == "sentence":
        return Message("sentence {side}", side=val)
    if fam == "special":
        return Message("the token {token}", token=val)
    if fam == "position":
        return Message("position {n}", n=val)
    if fam == "word":
        return Message("the word “{word}”", word=val)
    return label
