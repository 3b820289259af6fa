"""Downstream classification tasks for fine-tuning (BERT §4.1; d2l §14.8): built-in tasks and the user's CSV.

Built-in tasks are derived from the built-in corpus grammar (``bertcore.data.corpus``): sentences of a corpus
with another seed are parsed with the grammar's public lexicon (``TOPICS``, ``MASS``, ``plural``) and, for
the negative class, minimally edited. They are chosen so that *word identity alone is not
enough*: every frequent word appears at about the same rate in both classes (tests/test_finetune.py checks
this), so a model must relate words to each other. Pre-training taught the encoder exactly such relations;
a randomly initialised model cannot learn them from a few dozen labels.

* ``coherence`` (single sentence, a semantic-anomaly task): does every word fit one scene? The negative copies
  a corpus sentence and swaps one topic word (adjective, place, food, animal food, object or readable) for
  the same kind of word, in the same number, from another topic ("The farmer milks the cows in the cosmic
  barn."). The swapped-in word is an ordinary word that is fine in its own topic; only its clash with the rest
  of the sentence gives it away. Masked-LM pre-training predicts places, objects and adjectives from their
  topic, and its 10% random replacements taught it to notice an out-of-place token (§3.1).
* ``same_topic`` (sentence pair, semantic relatedness like STS/MRPC): two sentences from *different* corpus
  pairs, both first sentences with a full noun-phrase subject; are they about the same topic? B never continues
  A (no pronoun, no connective), so this is not next-sentence prediction, but NSP's negatives (B from another
  pair, usually another topic; §3.2) made the pooled [CLS] vector sensitive to topic agreement between
  segments, which is what transfers. Each sentence's topic comes from its topic-specific words.
Subject-verb agreement (a CoLA-like task: swap the main verb's number) was tried too and left out: with 64
labels the default pretrained model beat random initial weights by only 10-13 points (docs/FINETUNE.md).

Splits: a fixed held-out set and a training pool that share no text; ``labelled_subset`` draws the first N
training examples of a seeded, class-balanced order, so a smaller subset is a prefix of a larger one.
"""
from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path

from bertcore.data import corpus as C
from bertcore.data.corpus import builtin_corpus, decode_text_file, max_corpus_bytes, too_large
from bertcore.errors import CorpusError, InputError
from bertcore.data.user_text import is_blank
from bertcore.message import Message

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
    """Topic words of the built-in grammar, from bertcore.data.corpus's public lexicon."""

    def __init__(self):
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
        # every topic-specific word form (subjects too) -> its topic
        self.topic_of = {k: v[0] for k, v in self.slot_words.items()}
        for topic, lex in C.TOPICS.items():
            for noun in [*lex["people"], *lex["animals"], *lex["vehicles"]]:
                self.topic_of[tuple(noun.split())] = self.topic_of[tuple(C.plural(noun).split())] = topic
            for name in lex["names"]:
                self.topic_of[(name.lower(),)] = topic
        self.topics = list(C.TOPICS)

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


def _words(sentence: str) -> list[str]:
    return sentence.rstrip(".").split()


def _sentence(words: list[str]) -> str:
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


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


def coherence_task(seed: int = 0) -> Task:
    """Does every word fit one scene, or was one swapped in from another topic? (see the module docstring)."""
    lex = _Lexicon()
    rng = random.Random(seed)
    sents = [s for p in builtin_corpus(seed=3000 + seed, n_pairs=POOL_SIZE).pairs for s in p
             if lex.topic(s) is not None and len(lex.spans([w.lower() for w in _words(s)], lex.topic_of)) >= 2]
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
    return Task("coherence", Message("Does every word fit one scene? In the 'odd word' class one adjective, place, "
                                     "food, object or readable was swapped for the same kind of word from another "
                                     "topic."),
                [Message("odd word"), Message("coherent")], False, train, held)


def same_topic_task(seed: int = 0) -> Task:
    """Two sentences from different pairs: same topic or not? (see the module docstring)."""
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
    return Task("same_topic", Message("Sentence pair: are two sentences from different pairs about the same topic?"),
                [Message("different topic"), Message("same topic")], True, train, held)


BUILTIN_TASKS = {"coherence": coherence_task, "same_topic": same_topic_task}


def task_names() -> list[str]:
    return list(BUILTIN_TASKS)


# ------------------------------------------------------------------ user CSV
def load_task_csv(path_or_bytes, name: str | None = None, seed: int = 0, held_out_frac: float = 0.2) -> Task:
    """A user task from CSV with a header ``text,label`` or ``text_a,text_b,label``.

    Same rules as corpus uploads (size cap ``BERTCORE_MAX_CORPUS_BYTES``, UTF-8, no binary). Labels may be any
    strings; classes are sorted by name. A seeded, class-stratified ``held_out_frac`` is held out.
    Raises ``InputError`` (or ``CorpusError`` for encoding/size problems) saying what to fix.
    """
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data, name = bytes(path_or_bytes), name or "uploaded CSV"
    else:
        p = Path(path_or_bytes).expanduser()
        name = name or p.name
        if not p.is_file():
            raise InputError(Message("task file {path} not found; give a CSV file or a built-in task ({tasks})",
                                     path=str(p), tasks=", ".join(task_names())))
        if p.stat().st_size > max_corpus_bytes():
            raise CorpusError(too_large(p, p.stat().st_size, max_corpus_bytes()))
        data = p.read_bytes()
    if not data.strip():
        raise InputError(Message("{name} is empty; give a CSV with a header line text,label (or text_a,text_b,label)",
                                 name=name))
    text = decode_text_file(data, name)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise InputError(Message("{name} is not valid CSV ({error}); quote fields that contain commas", name=name,
                                 error=str(e))) from None
    header = [h.strip().lower() for h in rows[0]]
    pair = "text_a" in header
    need = ["text_a", "text_b", "label"] if pair else ["text", "label"]
    missing = [c for c in need if c not in header]
    if missing:
        raise InputError(Message("{name} lacks the column(s) {missing}; the first line must be the header "
                                 "text,label (single sentences) or text_a,text_b,label (sentence pairs); found "
                                 "{found}", name=name, missing=", ".join(missing),
                                 found=", ".join(header) or Message("nothing")))
    col = {c: header.index(c) for c in need}
    raw = []
    for no, row in enumerate(rows[1:], 2):
        if not any(x.strip() for x in row):
            continue
        if len(row) < len(header):
            raise InputError(Message("{name} line {no} has {n} field(s) but the header has {m}; quote fields that "
                                     "contain commas", name=name, no=no, n=len(row), m=len(header)))
        vals = {c: row[i].strip() for c, i in col.items()}
        empty = [c for c, v in vals.items() if is_blank(v)]  # invisible characters only count as empty too
        if empty:
            raise InputError(Message("{name} line {no}: the {field} field is empty; every row needs text and a label",
                                     name=name, no=no, field=empty[0]))
        raw.append(vals)
    if len(raw) < MIN_CSV_ROWS:
        raise InputError(Message("{name} has {n} labelled row(s); at least {min} are needed to train and hold out a "
                                 "test split", name=name, n=len(raw), min=MIN_CSV_ROWS))
    labels = sorted({r["label"] for r in raw})
    if len(labels) < 2:
        raise InputError(Message("{name} has only the label {label}; a classifier needs at least two classes",
                                 name=name, label=repr(labels[0])))
    if len(labels) > MAX_CSV_CLASSES:
        raise InputError(Message("{name} has {n} different labels (over {limit}); is the label column free text? "
                                 "Use a few class names", name=name, n=len(labels), limit=MAX_CSV_CLASSES))
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
        raise InputError(Message("{name}: no class has two or more rows, so nothing can be held out; add more rows",
                                 name=name))
    rng.shuffle(train)
    return Task(Path(name).stem, Message("user CSV {name}: {n} rows, {k} classes", name=name, n=len(ex), k=len(labels)),
                labels, pair, train, held)


def get_task(spec: str, seed: int = 0) -> Task:
    """A built-in task name or a CSV file path."""
    if spec in BUILTIN_TASKS:
        return BUILTIN_TASKS[spec](seed)
    if spec.lower().endswith(".csv") or Path(spec).expanduser().is_file():
        return load_task_csv(spec, seed=seed)
    raise InputError(Message("unknown task {task}; use one of {tasks} or a .csv file", task=repr(spec),
                             tasks=", ".join(task_names())))


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
        raise InputError(Message("labels={n} must be a whole number >= 1", n=repr(n)))
    return order[:n]
