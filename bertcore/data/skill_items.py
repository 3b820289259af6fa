"""Skills with known answers: minimal pairs drawn from the built-in grammar (``bertcore.data.corpus``).

An MLM item is a text with exactly one ``[MASK]``, a right word and a wrong word; it is passed when the model
gives P(right) > P(wrong) at the mask (targeted syntactic evaluation: Linzen et al. 2016; Goldberg 2019; BLiMP,
Warstadt et al. 2020). An NSP item is a sentence A, its true next sentence B and a wrong B; it is passed when
P(IsNext | A, true B) > P(IsNext | A, wrong B) (BERT §3.2). Every skill is a choice between two answers, so its
chance level is 0.5. Items are chosen so that exactly one answer is right under the grammar:

=================  ====================================================================  ==========================
skill              item (right / wrong)                                                  what decides it
=================  ====================================================================  ==========================
verb_agreement     ``the muddy cows [MASK] hay in the barn .`` eat / eats                the subject's number
article_a_an       ``[MASK] old cow is muddy .`` an / a                                  the next word's first sound
det_number         ``[MASK] muddy cows eat hay .`` these / this (those / that)          the noun's number
pronoun_gender     A ``the cook eats bread .`` B ``[MASK] walks to the oven .`` he / she  A's subject, across [SEP]
selection          ``the farmer eats the [MASK] .`` apple / hay (the cow: hay / apple)   what the verb can take
topic_place        ``the farmer walks to the [MASK] .`` barn / (another topic's place)   the subject's topic
nsp_other_topic    A, true B / a B of another topic                                      topic words
nsp_same_topic     A, true B / a B of the same topic about another subject              subject and pronoun links
=================  ====================================================================  ==========================

Items are held out: none equals a training sentence (or pair) of the run's corpus (checked by the caller with
``held_out``). A user's own items come from a CSV of ``text,right,wrong`` (``parse_skill_csv``).
"""
from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import asdict, dataclass

from bertcore.data.corpus import (
    MASS, PREPS, TOPICS, Corpus, LabelledPair, labelled_pair, labelled_sentences, pronoun, sentence, verb_forms,
)
from bertcore.data.tokenization import basic_tokenize
from bertcore.data.user_text import is_blank
from bertcore.errors import InputError
from bertcore.message import Message

MASK = "[MASK]"
CHANCE = 0.5  # every item is a choice between two answers
ITEMS_PER_SKILL = 200
SKILLS_SEED = 2024  # the suite's own seed: its sentences are drawn apart from any run's corpus

# skill -> what it tests (shown on screen, in the CLI's JSON and in skills_items.jsonl's readers)
SKILLS = {
    "verb_agreement": "the verb's number agrees with the subject (is/are, eats/eat)",
    "article_a_an": "a or an before the next word's first sound",
    "det_number": "this/these, that/those agree with the noun's number",
    "pronoun_gender": "sentence B's pronoun takes the gender of A's subject (across [SEP])",
    "selection": "what the verb can take: people eat food, animals eat animal food",
    "topic_place": "a person walks to a place of their own topic",
    "nsp_other_topic": "NSP: the true B beats a B from another topic",
    "nsp_same_topic": "NSP: the true B beats a B of the same topic about another subject",
}
NSP_SKILLS = ("nsp_other_topic", "nsp_same_topic")
USER_PREFIX = "own:"  # a user's skill file's items are skill "own:<file stem>"
MAX_USER_ITEMS = 5000
MAX_USER_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class SkillItem:
    """One minimal pair. MLM: ``text`` has one [MASK]; ``right``/``wrong`` are words (``text_b``: B of a pair,
    None for one sentence; its [MASK] may sit in A or B). NSP: ``text`` is A, ``right``/``wrong`` are the true
    and the wrong B."""
    skill: str
    text: str
    right: str
    wrong: str
    text_b: str | None = None

    @property
    def is_nsp(self) -> bool:
        return self.skill in NSP_SKILLS

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> SkillItem:
        return cls(str(d["skill"]), str(d["text"]), str(d["right"]), str(d["wrong"]),
                   None if d.get("text_b") is None else str(d["text_b"]))

    def filled(self) -> tuple[str, str | None]:
        """The text(s) with the right answer in place: what must not be a training sentence."""
        if self.is_nsp:
            return self.text, self.right
        fill = lambda t: t.replace(MASK, self.right) if t is not None else None  # noqa: E731
        return fill(self.text), fill(self.text_b)


def _key(text: str) -> str:
    return " ".join(basic_tokenize(text))


def _form(verb: str, number: str) -> str:
    return verb_forms(verb)[0 if number == "sg" else 1]


def _other_form(word: str) -> str | None:
    """eats -> eat, are -> is: the other number's form of a verb form of the grammar (None if unknown)."""
    for lex in TOPICS.values():
        for lemma in ["eat", "read", "have", "be", "walk", "stop", *lex["animal_verbs"], *lex["vehicle_verbs"],
                      *(v for v, _ in lex["topic_verbs"])]:
            sg, pl = verb_forms(lemma)
            if word.lower() == sg:
                return pl
            if word.lower() == pl:
                return sg
    return None


def _masked(words: list[str], i: int) -> str:
    return sentence(" ".join([*words[:i], MASK, *words[i + 1:]]))


def _verb_agreement(rng: random.Random, n: int):
    for s in labelled_sentences(rng.randrange(1 << 30), n):
        words = list(s.words[:-1])
        other = _other_form(words[s.verb])
        if other and other != words[s.verb].lower():
            yield SkillItem("verb_agreement", _masked(words, s.verb), words[s.verb].lower(), other), s.number


_DET_PAIRS = {"this": "these", "these": "this", "that": "those", "those": "that", "a": "an", "an": "a"}


def _determiners(rng: random.Random, n: int):
    """this/these, that/those: the subject's determiner (a/an come from objects, ``_articles``)."""
    for s in labelled_sentences(rng.randrange(1 << 30), n):
        words = list(s.words[:-1])
        det = words[0].lower()
        if det in ("this", "these", "that", "those"):
            yield SkillItem("det_number", _masked(words, 0), det, _DET_PAIRS[det]), det


def _articles(pairs: list[LabelledPair], rng: random.Random):
    """a/an before a countable object of a topic verb (``the sailor repairs an anchor``), as the grammar writes
    them: "an" exactly before a vowel-initial word."""
    for p in pairs:
        if p.kind != "person":
            continue
        lex = TOPICS[p.topic]
        lemma, kind = rng.choice(lex["topic_verbs"])
        nouns = [w for w in lex[kind] if " " not in w and w not in MASS] if kind in ("food", "objects", "animals",
                                                                                     "readables") else []
        if not nouns:
            continue
        noun = rng.choice(nouns)
        adj = rng.choice(lex["adjs"]) if rng.random() < 0.3 else ""
        first = adj or noun
        right = "an" if first[0] in "aeiou" else "a"
        text = sentence(" ".join(w for w in (p.subject, _form(lemma, p.number), MASK, adj, noun) if w))
        yield SkillItem("article_a_an", text, right, _DET_PAIRS[right]), right


def _lexicon_word(words: list[str]) -> list[str]:
    return [w for w in words if " " not in w]


def _pairs(rng: random.Random, n: int) -> list[LabelledPair]:
    return [labelled_pair(rng) for _ in range(n)]


def _pronoun_gender(pairs: list[LabelledPair]):
    for p in pairs:
        if p.kind == "person" and p.number == "sg" and p.ref_b in ("he", "she"):
            b = sentence(" ".join(w for w in (p.conn, MASK, p.pred_b) if w))
            yield SkillItem("pronoun_gender", p.a, p.ref_b, "she" if p.ref_b == "he" else "he", text_b=b), p.ref_b


def _selection(pairs: list[LabelledPair], rng: random.Random):
    for p in pairs:
        if p.kind not in ("person", "animal"):
            continue
        lex = TOPICS[p.topic]
        food, animal_food = _lexicon_word(lex["food"]), _lexicon_word(lex["animal_food"])
        if not food or not animal_food:
            continue
        right, wrong = (rng.choice(food), rng.choice(animal_food))
        if p.kind == "animal":
            right, wrong = wrong, right
        loc = f" {rng.choice(PREPS)} the {rng.choice(lex['places'])}" if rng.random() < 0.5 else ""
        yield SkillItem("selection", sentence(f"{p.subject} {_form('eat', p.number)} the {MASK}{loc}"), right,
                        wrong), p.kind


def _topic_place(pairs: list[LabelledPair], rng: random.Random):
    topics = list(TOPICS)
    for p in pairs:
        if p.kind != "person":
            continue
        right = rng.choice(_lexicon_word(TOPICS[p.topic]["places"]))
        other = rng.choice([t for t in topics if t != p.topic])
        wrong = rng.choice(_lexicon_word(TOPICS[other]["places"]))
        yield SkillItem("topic_place", sentence(f"{p.subject} {_form('walk', p.number)} to the {MASK}"), right,
                        wrong), p.number


def _nsp(pairs: list[LabelledPair], rng: random.Random):
    by_topic: dict[str, list[LabelledPair]] = {}
    for p in pairs:
        by_topic.setdefault(p.topic, []).append(p)
    for p in pairs:
        other = rng.choice([q for t, qs in by_topic.items() if t != p.topic for q in qs[:50]])
        yield SkillItem("nsp_other_topic", p.a, p.b, other.b), "pair"  # true and wrong B are scored apart: no answer bias
        # the same topic, another subject, and a B that cannot refer to A's subject (another noun, name or pronoun)
        own = pronoun(p.kind, p.number, p.gender)
        same = [q for q in by_topic[p.topic][:50] if q.ref != p.ref and q.ref_b not in (own, p.ref_b)]
        if same:
            yield SkillItem("nsp_same_topic", p.a, p.b, rng.choice(same).b), "pair"


class TrainingText:
    """The sentences and pairs of a training corpus, normalised as the tokenizer splits them (case, spacing)."""

    def __init__(self, corpus: Corpus | None):
        self.sentences = {_key(s) for s in corpus.sentences()} if corpus is not None else set()
        self.pairs = {(_key(a), _key(b)) for a, b in corpus.pairs} if corpus is not None else set()

    def holds(self, item: SkillItem) -> bool:
        """True when any filled-in sentence of ``item`` (or its pair) is a training sentence (or pair)."""
        a, b = (_key(t) if t is not None else None for t in item.filled())
        return a in self.sentences or (b is not None and (b in self.sentences or (a, b) in self.pairs))


def held_out(items, corpus: Corpus | TrainingText | None) -> list[SkillItem]:
    """The items none of whose filled-in sentences (or whose pair) the corpus holds."""
    seen = corpus if isinstance(corpus, TrainingText) else TrainingText(corpus)
    return [it for it in items if not seen.holds(it)]


_MADE: dict = {}  # (id(corpus), n, seed) -> (corpus, items): the runs of one process (a study's lane) share them


def builtin_items(corpus: Corpus | None = None, n: int = ITEMS_PER_SKILL, seed: int = SKILLS_SEED) -> list[SkillItem]:
    """Up to ``n`` held-out items per skill of ``SKILLS``, as many of each right answer (or subject kind), all drawn
    from ``random.Random(seed)``; none equal to a sentence or pair of ``corpus`` (the run's training corpus). Made
    once per corpus object (a corpus is read-only once built), so every run of a study's process shares them."""
    key = (id(corpus), int(n), int(seed))
    hit = _MADE.get(key)
    if hit is not None and hit[0] is corpus:
        return list(hit[1])
    items = _builtin_items(corpus, n, seed)
    if len(_MADE) >= 4:
        _MADE.pop(next(iter(_MADE)))
    _MADE[key] = (corpus, items)
    return list(items)


def _builtin_items(corpus: Corpus | None, n: int, seed: int) -> list[SkillItem]:
    rng = random.Random(seed)
    seen = TrainingText(corpus)
    pairs = _pairs(rng, 20 * n)
    gens = [_verb_agreement(rng, 3 * n), _determiners(rng, 8 * n), _articles(pairs, rng), _pronoun_gender(pairs),
            _selection(pairs, rng),
            _topic_place(pairs, rng), _nsp(pairs, rng)]
    # Each skill's items are split evenly over its groups (the right answer: a/an, this/these, he/she, the
    # subject's number or kind), so a model that always prefers one answer scores chance, not the majority share.
    groups: dict[str, dict[str, list[SkillItem]]] = {k: {} for k in SKILLS}
    done: set = set()
    for gen in gens:
        for it, group in gen:
            key = (it.skill, it.text, it.text_b, it.right)
            bucket = groups[it.skill].setdefault(group, [])
            if len(bucket) < n and key not in done and not seen.holds(it):
                done.add(key)
                bucket.append(it)
    out = []
    for by_group in groups.values():
        share = min((len(b) for b in by_group.values()), default=0)
        share = min(share, n // max(1, len(by_group)))
        picked = [b[:share] for b in by_group.values()]
        out += [it for row in zip(*picked) for it in row]  # interleaved: group 1, group 2, ...
    return out


# ------------------------------------------------------------------ files
def write_items_jsonl(items) -> str:
    return "".join(it.to_json() + "\n" for it in items)


def read_items_jsonl(text: str) -> list[SkillItem]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(SkillItem.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as e:
                raise InputError(Message("skill items line {no} is not a skill item ({err}); each line must be a JSON "
                                         "object with skill, text, right, wrong", no=no, err=str(e))) from None
    return out


def parse_skill_csv(data: bytes | str, name: str, tokenizer) -> list[SkillItem]:
    """A user's own skill: a CSV with a header ``text,right,wrong`` and one [MASK] per text. Every problem is an
    InputError that names the line and says what to fix; the items' skill is ``own:<name's stem>``."""
    if isinstance(data, bytes):
        if len(data) > MAX_USER_BYTES:
            raise InputError(Message("{name} is {size} bytes; a skill file may hold at most {limit} bytes: split "
                                     "it", name=name, size=f"{len(data):,}", limit=f"{MAX_USER_BYTES:,}"))
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise InputError(Message("{name} is not UTF-8 text; save it as a UTF-8 CSV with the header "
                                     "text,right,wrong", name=name)) from None
    rows = list(csv.reader(io.StringIO(data)))
    if not rows or [c.strip().lower() for c in rows[0]] != ["text", "right", "wrong"]:
        raise InputError(Message("{name} must start with the header line text,right,wrong (one [MASK] per text), "
                                 "e.g. 'the cows [MASK] hungry .,are,is'", name=name))
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0] or "skill"
    items = []
    for no, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != 3:
            raise InputError(Message("{name} line {no} has {n} fields; write text,right,wrong (quote a text that "
                                     "holds a comma)", name=name, no=no, n=len(row)))
        text, right, wrong = (c.strip() for c in row)
        for field, value in (("text", text), ("right", right), ("wrong", wrong)):
            if is_blank(value):
                raise InputError(Message("{name} line {no}: the {field} field is empty; fill it in", name=name,
                                         no=no, field=field))
        n_masks = tokenizer.encode(text).count(tokenizer.mask_id)
        if n_masks != 1:
            raise InputError(Message("{name} line {no} has {n} [MASK] tokens; write exactly one [MASK] per text",
                                     name=name, no=no, n=n_masks))
        for field, word in (("right", right), ("wrong", wrong)):
            ids = tokenizer.encode(word)
            if len(ids) != 1 or ids[0] == tokenizer.unk_id:
                pieces = " ".join(tokenizer.convert_ids_to_tokens(ids))
                raise InputError(Message("{name} line {no}: the {field} word {word} is not one token of this "
                                         "model's vocabulary (it becomes: {pieces}); choose a word the vocabulary "
                                         "holds whole", name=name, no=no, field=field, word=repr(word),
                                         pieces=pieces))
        if right.lower() == wrong.lower():
            raise InputError(Message("{name} line {no}: right and wrong are the same word; give two different words",
                                     name=name, no=no))
        items.append(SkillItem(USER_PREFIX + stem, text, right, wrong))
        if len(items) > MAX_USER_ITEMS:
            raise InputError(Message("{name} has more than {limit} items; keep the file below that", name=name,
                                     limit=f"{MAX_USER_ITEMS:,}"))
    if not items:
        raise InputError(Message("{name} has no items under its header; add lines of text,right,wrong", name=name))
    return items
