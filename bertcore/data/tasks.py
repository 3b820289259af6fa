"""Downstream classification tasks for fine-tuning (BERT §4; d2l §14.8): built-in tasks and the user's CSV.

Built-in tasks are derived from the built-in corpus grammar (``bertcore.data.corpus``): sentences of a corpus
with another seed are parsed with the grammar's public lexicon (``TOPICS``, ``verb_forms``, ``plural``) and,
for the negative class, minimally edited. Both are chosen so that *word identity alone is not enough*: every
word appears about equally often in both classes, so a model must relate two words to each other, which is
what masked-LM and NSP pre-training taught the encoder (and what a randomly initialised model cannot learn
from a few dozen labels).

* ``agreement`` (single sentence, like CoLA): is the sentence grammatical? The negative copies a corpus
  sentence and swaps its main verb to the other number ("The cows eats hay."). Singular and plural subjects
  are balanced within each class, so each verb form appears as often in both classes; only the subject-verb
  *pair* decides. Pre-training predicts masked verb forms from the subject's number (§3.1).
* ``pronoun`` (sentence pair, not NSP: both sentences always come from the same pair and topic): does the
  pronoun that starts B fit A's subject? The negative swaps it for another pronoun (he / she / it / they) and
  re-inflects B's verb so B stays grammatical on its own. Each pronoun appears equally often in both classes,
  so the label depends on A's subject: its gender (a lexical fact: the cook is "he", the baker "she"), animacy
  and number. Pre-training saw these pronouns follow their subjects in every true next sentence (§3.2).

Splits: a fixed held-out set and a training pool that share no text; ``labelled_subset`` draws the first N
training examples of a seeded, class-balanced order, so a smaller subset is a prefix of a larger one.
"""
from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path

from bertcore.errors import CorpusError, InputError

HELD_OUT_SIZE = 600
POOL_SIZE = 3000
MAX_CSV_CLASSES = 50
MIN_CSV_ROWS = 8


@dataclass(frozen=True)
class TaskExample:
    text_a: str
    text_b: str | None
    label: int


@dataclass
class Task:
    """A labelled classification task with a training pool and a held-out split."""

    name: str
    description: str
    labels: list[str]
    pair: bool
    train: list[TaskExample]
    held_out: list[TaskExample]

    @property
    def num_labels(self) -> int:
        return len(self.labels)


# ------------------------------------------------------------------ grammar parsing (public corpus lexicon)
class _Lexicon:
    """Word forms of the built-in grammar, from bertcore.data.corpus's public lexicon."""

    def __init__(self):
        from bertcore.data import corpus as C

        self.adjs = {a for lex in C.TOPICS.values() for a in lex["adjs"]}
        # noun form (lowercase, may be two words) -> (number, kind, gender)
        self.nouns: dict[tuple[str, ...], tuple[str, str, str]] = {}
        for lex in C.TOPICS.values():
            for noun, g in lex["people"].items():
                self._add_noun(noun, "person", g, C.plural)
            for noun in lex["animals"]:
                self._add_noun(noun, "animal", "n", C.plural)
            for noun in lex["vehicles"]:
                self._add_noun(noun, "vehicle", "n", C.plural)
        self.names = {n.lower(): g for n, g in C.NAMES.items()}
        lemmas = {"eat", "read", "have", "be", "walk", "stop"}
        for lex in C.TOPICS.values():
            lemmas.update(v for v, _ in lex["topic_verbs"])
            lemmas.update(lex["animal_verbs"])
            lemmas.update(lex["vehicle_verbs"])
        self.sg_to_pl: dict[str, str] = {}
        self.pl_to_sg: dict[str, str] = {}
        for lemma in lemmas:
            sg, pl = C.verb_forms(lemma)
            self.sg_to_pl[sg], self.pl_to_sg[pl] = pl, sg
        # topic words that keep their slot when swapped: n-gram -> (topic, category, number)
        self.slot_words: dict[tuple[str, ...], tuple[str, str, str]] = {}
        for topic, lex in C.TOPICS.items():
            for cat in SWAP_CATEGORIES:
                for w in lex[cat]:
                    self.slot_words[tuple(w.split())] = (topic, cat, "mass" if w in C.MASS else "sg")
                    if cat != "adjs" and w not in C.MASS:
                        self.slot_words[tuple(C.plural(w).split())] = (topic, cat, "pl")
        self.by_slot: dict[tuple[str, str, str], list[str]] = {}
        for key, (topic, cat, num) in self.slot_words.items():
            self.by_slot.setdefault((topic, cat, num), []).append(" ".join(key))
        self.topic_of = {k: v[0] for k, v in self.slot_words.items()}
        for topic, lex in C.TOPICS.items():
            for noun in [*lex["people"], *lex["animals"], *lex["vehicles"]]:
                self.topic_of[tuple(noun.split())] = self.topic_of[tuple(C.plural(noun).split())] = topic
            for name in lex["names"]:
                self.topic_of[(name.lower(),)] = topic
        self.topics = list(C.TOPICS)
        self.connectives = sorted({c for c in C.CONNECTIVES if c}, key=lambda c: -len(c.split()))
        self.dets = {"a", "an", "the", "this", "that", "these", "those", "some", "two", "three"}

    def _add_noun(self, noun: str, kind: str, gender: str, plural) -> None:
        self.nouns[tuple(noun.split())] = ("sg", kind, gender)
        self.nouns[tuple(plural(noun).split())] = ("pl", kind, gender)

    def subject(self, words: list[str], i: int = 0):
        """Parse SUBJ at words[i:] -> (index after it, number, kind, gender) or None."""
        if i < len(words) and words[i] in self.names:
            return i + 1, "sg", "person", self.names[words[i]]
        if i >= len(words) or words[i] not in self.dets:
            return None
        j = i + 1
        if j < len(words) and words[j] in self.adjs:
            j += 1
        for n in (2, 1):
            key = tuple(words[j:j + n])
            if len(key) == n and key in self.nouns:
                return (j + n, *self.nouns[key])
        return None

    def spans(self, low: list[str], table: dict) -> list[tuple[int, int]]:
        """(start, end) of the words of ``table`` (longest match first, two-word items included)."""
        out, i = [], 0
        while i < len(low):
            n = next((n for n in (2, 1) if tuple(low[i:i + n]) in table), 0)
            if n:
                out.append((i, i + n))
            i += n or 1
        return out

    def topic(self, sentence: str) -> str | None:
        """The topic all topic-specific words of ``sentence`` belong to (None if none or mixed)."""
        low = [w.lower() for w in _words(sentence)]
        found = {self.topic_of[tuple(low[a:b])] for a, b in self.spans(low, self.topic_of)}
        return found.pop() if len(found) == 1 else None

    def verb_agrees(self, word: str, number: str) -> bool:
        return word in (self.sg_to_pl if number == "sg" else self.pl_to_sg)

    def flip(self, word: str) -> str:
        return self.sg_to_pl.get(word) or self.pl_to_sg[word]


def _words(sentence: str) -> list[str]:
    return sentence.rstrip(".").split()


def _sentence(words: list[str]) -> str:
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


def _pronoun(number: str, kind: str, gender: str) -> str:
    if number == "pl":
        return "they"
    if kind == "person":
        return "he" if gender == "m" else "she"
    return "it"


PRONOUNS = ("he", "she", "it", "they")
SWAP_CATEGORIES = ("adjs", "places", "food", "animal_food", "objects", "readables")


def _intruder(sentence: str, lex: "_Lexicon", rng: random.Random) -> str | None:
    """``sentence`` with one topic word replaced by a word of the same slot (category, number) of another topic."""
    words = _words(sentence)
    low = [w.lower() for w in words]
    spans = lex.spans(low, lex.slot_words)
    if not spans:
        return None
    a, b = rng.choice(spans)
    topic, cat, num = lex.slot_words[tuple(low[a:b])]
    others = [w for t in lex.topics if t != topic for w in lex.by_slot.get((t, cat, num), [])]
    if not others:
        return None
    new = rng.choice(others).split()
    if a > 0 and low[a - 1] in ("a", "an"):  # keep the article right: "an" exactly before a vowel
        words[a - 1] = "an" if new[0][0] in "aeiou" else "a"
    return _sentence(words[:a] + new + words[b:])


def _agreement_candidates(pairs, lex: _Lexicon):
    """(number, grammatical sentence, same sentence with its verb swapped to the other number)."""
    out = []
    for pair in pairs:
        for s in pair:
            words = _words(s)
            low = [w.lower() for w in words]
            parsed = lex.subject(low)
            if parsed is None or parsed[0] >= len(low) or not lex.verb_agrees(low[parsed[0]], parsed[1]):
                continue
            bad = list(words)
            bad[parsed[0]] = lex.flip(low[parsed[0]])
            out.append((parsed[1], s, _sentence(bad)))
    return out


def _pronoun_candidates(pairs, lex: _Lexicon):
    """(A, B words, index of B's pronoun, the pronoun that fits A's subject) for pairs whose B starts with one."""
    out = []
    for a, b in pairs:
        subj = lex.subject([w.lower() for w in _words(a)])
        if subj is None:
            continue
        words = _words(b)
        low = [w.lower() for w in words]
        i = 0
        for c in lex.connectives:
            if " ".join(low[:len(c.split())]) == c:
                i = len(c.split())
                break
        right = _pronoun(*subj[1:])
        if i + 1 < len(low) and low[i] == right and lex.verb_agrees(low[i + 1], subj[1]):
            out.append((a, words, i, right))
    return out


def _with_pronoun(words: list[str], i: int, old: str, new: str, lex: _Lexicon) -> str:
    w = list(words)
    w[i] = new
    if (old == "they") != (new == "they"):  # number changes: re-inflect B's verb so B alone stays grammatical
        w[i + 1] = lex.flip(w[i + 1].lower())
    return _sentence([x.lower() if k == 0 else x for k, x in enumerate(w)])


def _balanced_split(examples: list[TaskExample], rng: random.Random) -> tuple[list, list]:
    """Dedupe by text, shuffle, hold out HELD_OUT_SIZE (class-balanced); the rest is the training pool."""
    seen, uniq = set(), []
    for e in examples:
        key = (e.text_a, e.text_b)
        if key not in seen:
            seen.add(key)
            uniq.append(e)
    rng.shuffle(uniq)
    by_label: dict[int, list] = {}
    for e in uniq:
        by_label.setdefault(e.label, []).append(e)
    per = HELD_OUT_SIZE // len(by_label)
    held = [e for lab in sorted(by_label) for e in by_label[lab][:per]]
    held_keys = {(e.text_a, e.text_b) for e in held}
    train = [e for e in uniq if (e.text_a, e.text_b) not in held_keys]
    rng.shuffle(held)
    return train, held


def agreement_task(seed: int = 0) -> Task:
    """Grammatical vs verb-number-swapped sentences (see the module docstring)."""
    from bertcore.data.corpus import builtin_corpus

    lex = _Lexicon()
    rng = random.Random(seed)
    cands = _agreement_candidates(builtin_corpus(seed=1000 + seed, n_pairs=POOL_SIZE).pairs, lex)
    rng.shuffle(cands)
    by_num = {n: [c for c in cands if c[0] == n] for n in ("sg", "pl")}
    k = min(len(v) for v in by_num.values()) // 2  # per (number, label): subjects balanced in each class
    ex = []
    for n in ("sg", "pl"):
        ex += [TaskExample(good, None, 1) for _, good, _ in by_num[n][:k]]
        ex += [TaskExample(bad, None, 0) for _, _, bad in by_num[n][k:2 * k]]
    train, held = _balanced_split(ex, rng)
    return Task("agreement", "Is the sentence grammatical? The ungrammatical ones are corpus sentences with the main "
                "verb swapped to the other number (subject-verb agreement, like CoLA).",
                ["ungrammatical", "grammatical"], False, train, held)


def pronoun_task(seed: int = 0) -> Task:
    """Does B's pronoun fit A's subject? (see the module docstring)."""
    from bertcore.data.corpus import builtin_corpus

    lex = _Lexicon()
    rng = random.Random(seed)
    cands = _pronoun_candidates(builtin_corpus(seed=2000 + seed, n_pairs=3 * POOL_SIZE).pairs, lex)
    rng.shuffle(cands)
    by_right = {p: [c for c in cands if c[3] == p] for p in PRONOUNS}
    ex = []
    for p in PRONOUNS:  # as many positives with p as negatives showing p: the pronoun alone says nothing
        pos = by_right[p][: len(by_right[p]) // 2]
        ex += [TaskExample(a, _sentence(w), 1) for a, w, _, _ in pos]
        others = [c for q in PRONOUNS if q != p for c in by_right[q][len(by_right[q]) // 2:]]
        for a, w, i, right in rng.sample(others, min(len(pos), len(others))):
            ex.append(TaskExample(a, _with_pronoun(w, i, right, p, lex), 0))
    train, held = _balanced_split(ex, rng)
    return Task("pronoun", "Sentence pair: does the pronoun that starts B fit A's subject (gender, animacy, "
                "number)? Both sentences come from the same pair, so topic does not help (unlike NSP).",
                ["mismatch", "fits"], True, train, held)


def coherence_task(seed: int = 0) -> Task:
    """Does every word fit one scene, or was one swapped in from another topic? (see the module docstring)."""
    from bertcore.data.corpus import builtin_corpus

    lex = _Lexicon()
    rng = random.Random(seed)
    sents = [s for p in builtin_corpus(seed=3000 + seed, n_pairs=POOL_SIZE).pairs for s in p]
    rng.shuffle(sents)
    ex = []
    for i, s in enumerate(sents):
        if i % 2 == 0:
            ex.append(TaskExample(s, None, 1))
        else:
            bad = _intruder(s, lex, rng)
            if bad is not None:
                ex.append(TaskExample(bad, None, 0))
    train, held = _balanced_split(ex, rng)
    return Task("coherence", "Does every word fit one scene? In the 'odd word' class one adjective, place, food, "
                "object or readable was swapped for the same kind of word from another topic.",
                ["odd word", "coherent"], False, train, held)


def same_topic_task(seed: int = 0) -> Task:
    """Two sentences from different pairs: same topic or not? (see the module docstring)."""
    from bertcore.data.corpus import builtin_corpus

    lex = _Lexicon()
    rng = random.Random(seed)
    by_topic: dict[str, list[str]] = {}
    for a, _ in builtin_corpus(seed=4000 + seed, n_pairs=2 * POOL_SIZE).pairs:
        t = lex.topic(a)
        if t is not None:
            by_topic.setdefault(t, []).append(a)
    topics = sorted(by_topic)
    ex = []
    for i in range(POOL_SIZE + HELD_OUT_SIZE):
        t = rng.choice(topics)
        u = t if i % 2 == 0 else rng.choice([x for x in topics if x != t])
        a, b = rng.choice(by_topic[t]), rng.choice(by_topic[u])
        if a != b:
            ex.append(TaskExample(a, b, int(t == u)))
    train, held = _balanced_split(ex, rng)
    return Task("same_topic", "Sentence pair: are two sentences from different pairs about the same topic?",
                ["different topic", "same topic"], True, train, held)


BUILTIN_TASKS = {"agreement": agreement_task, "pronoun": pronoun_task, "coherence": coherence_task,
                 "same_topic": same_topic_task}


def task_names() -> list[str]:
    return list(BUILTIN_TASKS)


# ------------------------------------------------------------------ user CSV
def load_task_csv(path_or_bytes, name: str | None = None, seed: int = 0, held_out_frac: float = 0.2) -> Task:
    """A user task from CSV with a header ``text,label`` or ``text_a,text_b,label``.

    Same rules as corpus uploads (size cap ``BERTCORE_MAX_CORPUS_BYTES``, UTF-8, no binary). Labels may be any
    strings; classes are sorted by name. A seeded, class-stratified ``held_out_frac`` is held out.
    Raises ``InputError`` (or ``CorpusError`` for encoding/size problems) saying what to fix.
    """
    from bertcore.data.corpus import _decode, _max_bytes

    if isinstance(path_or_bytes, (bytes, bytearray)):
        data, name = bytes(path_or_bytes), name or "uploaded CSV"
    else:
        p = Path(path_or_bytes).expanduser()
        name = name or p.name
        if not p.is_file():
            raise InputError(f"task file {p} not found; give a CSV file or a built-in task ({', '.join(task_names())})")
        if p.stat().st_size > _max_bytes():
            raise CorpusError(f"{p} is {p.stat().st_size:,} bytes, over the {_max_bytes():,}-byte limit; use a "
                              "smaller file or raise the limit with the environment variable BERTCORE_MAX_CORPUS_BYTES")
        data = p.read_bytes()
    if not data.strip():
        raise InputError(f"{name} is empty; give a CSV with a header line text,label (or text_a,text_b,label)")
    text = _decode(data, name)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise InputError(f"{name} is not valid CSV ({e}); quote fields that contain commas") from None
    header = [h.strip().lower() for h in rows[0]]
    pair = "text_a" in header
    need = ["text_a", "text_b", "label"] if pair else ["text", "label"]
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(f"{name} lacks the column(s) {', '.join(missing)}; the first line must be the header "
                         f"text,label (single sentences) or text_a,text_b,label (sentence pairs); found "
                         f"{', '.join(header) or 'nothing'}")
    col = {c: header.index(c) for c in need}
    raw = []
    for no, row in enumerate(rows[1:], 2):
        if not any(x.strip() for x in row):
            continue
        if len(row) < len(header):
            raise InputError(f"{name} line {no} has {len(row)} field(s) but the header has {len(header)}; "
                             "quote fields that contain commas")
        vals = {c: row[i].strip() for c, i in col.items()}
        empty = [c for c, v in vals.items() if not v]
        if empty:
            raise InputError(f"{name} line {no}: the {empty[0]} field is empty; every row needs text and a label")
        raw.append(vals)
    if len(raw) < MIN_CSV_ROWS:
        raise InputError(f"{name} has {len(raw)} labelled row(s); at least {MIN_CSV_ROWS} are needed to train and "
                         "hold out a test split")
    labels = sorted({r["label"] for r in raw})
    if len(labels) < 2:
        raise InputError(f"{name} has only the label {labels[0]!r}; a classifier needs at least two classes")
    if len(labels) > MAX_CSV_CLASSES:
        raise InputError(f"{name} has {len(labels)} different labels (over {MAX_CSV_CLASSES}); is the label column "
                         "free text? Use a few class names")
    index = {lab: i for i, lab in enumerate(labels)}
    ex = [TaskExample(r["text_a"] if pair else r["text"], r["text_b"] if pair else None, index[r["label"]])
          for r in raw]
    rng = random.Random(seed)
    rng.shuffle(ex)
    held, train = [], []
    for lab in range(len(labels)):
        group = [e for e in ex if e.label == lab]
        k = max(1, round(len(group) * held_out_frac)) if len(group) > 1 else 0
        held += group[:k]
        train += group[k:]
    if not held:
        raise InputError(f"{name}: no class has two or more rows, so nothing can be held out; add more rows")
    rng.shuffle(train)
    return Task(Path(name).stem, f"user CSV {name}: {len(ex)} rows, {len(labels)} classes", labels, pair, train, held)


def get_task(spec: str, seed: int = 0) -> Task:
    """A built-in task name or a CSV file path."""
    if spec in BUILTIN_TASKS:
        return BUILTIN_TASKS[spec](seed)
    if spec.lower().endswith(".csv") or Path(spec).expanduser().is_file():
        return load_task_csv(spec, seed=seed)
    raise InputError(f"unknown task {spec!r}; use one of {', '.join(task_names())} or a .csv file")


def labelled_subset(task: Task, n: int | None, seed: int = 0) -> list[TaskExample]:
    """The first ``n`` (all if None) training examples of a seeded order that alternates classes.

    A smaller subset is a prefix of a larger one, so a sweep over ``n`` adds labels instead of redrawing them.
    """
    rng = random.Random(seed)
    groups = [[e for e in task.train if e.label == lab] for lab in range(task.num_labels)]
    for g in groups:
        rng.shuffle(g)
    order = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    if n is None:
        return order
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"labels={n!r} must be a whole number >= 1")
    return order[:n]
