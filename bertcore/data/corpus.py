"""Corpora of sentence pairs for pre-training (BERT §3.1 MLM needs sentences, §3.2 NSP needs pairs).

Built-in corpus grammar
-----------------------
A pair is two sentences about one *subject* in one *topic* (kitchen, farm, school, city, sea,
forest, hospital, garden, space, snow). Nearly every content word belongs to one topic: its people,
names, adjectives, animals, places, foods, objects and verbs. That is what gives NSP a signal: a
random B from another pair comes from another topic 90% of the time (10 topics). Each topic keeps a
small lexicon (about 45 word forms, ~470 words in all) so every topic word is seen often enough
for the model to learn which topic it belongs to; NSP leaves chance level after ~60-100k examples::

    PAIR     := A B
    A        := SUBJ_NP FRAME .                     (5-12 words)
    B        := [CONNECTIVE] SUBJ_REF FRAME' .      (same subject and topic, another frame)
    SUBJ_NP  := DET TOPIC_ADJ NOUN     with DET agreeing: singular a/an/the/this/that, plural the/these/those/some/two/three;
                                   "an" exactly before a vowel-initial word ("an old cow", "an owl")
              | NAME               (two per topic; always singular, gendered)
    SUBJ_REF := PRONOUN            he/she (gendered singular person), it (singular animal/vehicle), they (plural)
              | the [ADJ] NOUN     (the same noun in the same number) | NAME
    CONNECTIVE := then | later | after that | soon | every day | ""   (mostly none)

Frames put *selectional constraints* on the verb's object and place, and the verb agrees in number
with the subject (singular: eats/is/has/runs, plural: eat/are/have/run)::

    person : eat(s) HUMAN_FOOD [LOC] | read(s) READABLE [LOC] | has/have OBJ_NP | is/are TOPIC_ADJ [LOC]
             | TOPIC_VERB TOPIC_OBJECT [LOC] (twice as likely) | walk(s) to the PLACE
    animal : eat(s) ANIMAL_FOOD [LOC] | ANIMAL_VERB LOC | is/are TOPIC_ADJ [LOC]
    vehicle: VEHICLE_VERB along/across the ROUTE | stop(s) near the PLACE | is/are TOPIC_ADJ
    LOC    := in/at/near/behind/under the TOPIC_ADJ PLACE       (PLACE, foods, objects, animals are topic-specific)

So for MLM a masked verb form is predictable from the subject's number, an object from the verb, a
determiner from the noun, a place from the topic; for NSP a true B shares A's topic words and its
pronoun agrees with A's subject, while a B taken from another pair usually breaks both.
Everything is drawn from ``random.Random(seed)``: the same seed gives the same corpus.
"""
from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.data.tokenization import basic_tokenize
from bertcore.errors import ConfigError, CorpusError
from bertcore import settings
from bertcore.message import Message, reason
from bertcore.data.user_text import is_blank
from bertcore.data.segmentation import detect_language, split_sentences

MAX_CORPUS_BYTES = 5 * 1024 * 1024
"""Largest user corpus accepted by default (bytes); ``max_corpus_bytes()`` reads env ``BERTCORE_MAX_CORPUS_BYTES``."""


@dataclass
class Corpus:
    name: str
    pairs: list[tuple[str, str]]
    description: str = ""
    meta: dict = field(default_factory=dict)
    # Document id of each pair (BERT §3.2 / A.1: a NotNext B comes from *another document*). None: every pair
    # is its own document. Built-in corpus: one document per topic; prose: one per paragraph.
    documents: list[int] | None = None

    def sentences(self) -> list[str]:
        """All sentences (A and B of every pair) in order."""
        return [s for p in self.pairs for s in p]

    def texts(self) -> list[str]:
        """Texts to build a tokenizer from (same as :meth:`sentences`)."""
        return self.sentences()

    def __len__(self) -> int:
        return len(self.pairs)


# ------------------------------------------------------------------ lexicon
# irregular / special verb forms: lemma -> (singular, plural)
_VERB_FORMS = {"be": ("is", "are"), "have": ("has", "have")}


def verb_forms(lemma: str) -> tuple[str, str]:
    """(3rd person singular, plural) present forms."""
    if lemma in _VERB_FORMS:
        return _VERB_FORMS[lemma]
    if lemma.endswith(("sh", "ch", "s", "x", "o")):
        return lemma + "es", lemma
    if lemma.endswith("y") and lemma[-2] not in "aeiou":
        return lemma[:-1] + "ies", lemma
    return lemma + "s", lemma


_PLURAL_IRREGULAR = {"man": "men", "woman": "women", "child": "children", "mouse": "mice", "wolf": "wolves",
                     "knife": "knives", "loaf": "loaves", "leaf": "leaves", "goose": "geese"}


def plural(noun: str) -> str:
    if noun in _PLURAL_IRREGULAR:
        return _PLURAL_IRREGULAR[noun]
    if noun.endswith(("sh", "ch", "s", "x", "to")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


CONNECTIVES = ["then", "later", "after that", "soon", "every day"] + [""] * 10
PREPS = ["in", "at", "near", "behind", "under"]

# topic -> lexicon. food/objects/readables are (word, countable) lists; topic_verbs are (lemma, object kind).
TOPICS: dict[str, dict] = {
    "kitchen": dict(people={"cook": "m", "baker": "f"}, names={"Tom": "m", "Anna": "f"},
                  adjs=["hot", "sticky", "crispy"], animal_verbs=["nibble"], places=["kitchen", "stove", "oven"],
                  food=["soup", "bread"], animals=["cat", "mouse"], animal_food=["milk", "cheese"],
                  objects=["pot", "pan", "knife"], readables=["recipe", "menu"],
                  topic_verbs=[("cook", "food"), ("bake", "food")], vehicles=[], vehicle_verbs=[], routes=[]),
    "farm": dict(people={"farmer": "m", "milkmaid": "f"}, names={"Sam": "m", "Mia": "f"},
               adjs=["muddy", "dusty", "rusty"], animal_verbs=["graze"], places=["barn", "field", "stable"],
               food=["apple", "pear"], animals=["cow", "horse"], animal_food=["hay", "grass"],
               objects=["bucket", "rake", "shovel"], readables=["almanac", "calendar"],
               topic_verbs=[("feed", "animals"), ("milk", "animals")], vehicles=["tractor"],
               vehicle_verbs=["drive"], routes=["dirt road"]),
    "school": dict(people={"teacher": "f", "schoolboy": "m"}, names={"Ben": "m", "Emma": "f"},
                 adjs=["clever", "curious", "bored"], animal_verbs=["chirp"],
                 places=["classroom", "library", "playground"], food=["sandwich", "banana"],
                 animals=["hamster", "parrot"], animal_food=["seed", "lettuce"],
                 objects=["pencil", "notebook", "ruler"], readables=["book", "lesson"],
                 topic_verbs=[("study", "readables"), ("write", "readables")], vehicles=["school bus"],
                 vehicle_verbs=["drive"], routes=["school road"]),
    "city": dict(people={"driver": "m", "waitress": "f"}, names={"Leo": "m", "Lucy": "f"},
               adjs=["busy", "crowded", "modern"], animal_verbs=["wander"], places=["street", "park", "station"],
               food=["pizza", "burger"], animals=["dog", "pigeon"], animal_food=["bone", "crust"],
               objects=["ticket", "umbrella", "phone"], readables=["newspaper", "map"],
               topic_verbs=[("buy", "objects"), ("lose", "objects")], vehicles=["bus"], vehicle_verbs=["drive"],
               routes=["avenue"]),
    "sea": dict(people={"sailor": "m", "mermaid": "f"}, names={"Jack": "m", "Nora": "f"},
              adjs=["wet", "sandy", "windy"], animal_verbs=["swim"], places=["harbor", "beach", "dock"],
              food=["fish", "shrimp"], animals=["seal", "whale"], animal_food=["sardine", "squid"],
              objects=["net", "anchor", "oar"], readables=["chart", "logbook"],
              topic_verbs=[("catch", "food"), ("repair", "objects")], vehicles=["boat"], vehicle_verbs=["sail"],
              routes=["bay"]),
    "forest": dict(people={"ranger": "m", "huntress": "f"}, names={"Finn": "m", "Ivy": "f"},
                 adjs=["mossy", "shady", "leafy"], animal_verbs=["howl"], places=["forest", "cave", "river"],
                 food=["berry", "mushroom"], animals=["fox", "bear"], animal_food=["acorn", "insect"],
                 objects=["axe", "lantern", "compass"], readables=["trail guide", "field guide"],
                 topic_verbs=[("chop", "objects"), ("carry", "objects")], vehicles=["jeep"], vehicle_verbs=["bump"],
                 routes=["mountain road"]),
    "hospital": dict(people={"doctor": "m", "nurse": "f"}, names={"Max": "m", "Rosa": "f"},
                   adjs=["sick", "sterile", "careful"], animal_verbs=["limp"], places=["ward", "clinic", "pharmacy"],
                   food=["porridge", "jelly"], animals=["puppy", "kitten"], animal_food=["biscuit", "kibble"],
                   objects=["bandage", "pill", "syringe"], readables=["prescription", "medical report"],
                   topic_verbs=[("treat", "animals"), ("bandage", "animals")], vehicles=["ambulance"],
                   vehicle_verbs=["rush"], routes=["emergency lane"]),
    "garden": dict(people={"gardener": "m", "florist": "f"}, names={"Oscar": "m", "Daisy": "f"},
                 adjs=["green", "sunny", "blooming"], animal_verbs=["buzz"], places=["greenhouse", "pond", "hedge"],
                 food=["tomato", "strawberry"], animals=["bee", "butterfly"], animal_food=["nectar", "pollen"],
                 objects=["hose", "trowel", "watering can"], readables=["seed catalog", "plant label"],
                 topic_verbs=[("water", "food"), ("prune", "objects")], vehicles=["wheelbarrow"],
                 vehicle_verbs=["wobble"], routes=["garden path"]),
    "space": dict(people={"astronaut": "m", "pilot": "f"}, names={"Yuri": "m", "Sally": "f"},
                adjs=["cosmic", "weightless", "distant"], animal_verbs=["float"],
                places=["module", "crater", "airlock"], food=["ration", "dried meal"],
                animals=["alien", "robot dog"], animal_food=["battery", "stardust"],
                objects=["helmet", "spacesuit", "telescope"], readables=["star chart", "mission log"],
                topic_verbs=[("launch", "objects"), ("orbit", "places")], vehicles=["rocket"],
                vehicle_verbs=["blast"], routes=["moon"]),
    "snow": dict(people={"skier": "m", "snowboarder": "f"}, names={"Olaf": "m", "Elsa": "f"},
               adjs=["icy", "frozen", "snowy"], animal_verbs=["slide"], places=["slope", "igloo", "lodge"],
               food=["cocoa", "soup pot"], animals=["penguin", "husky"], animal_food=["krill pellet", "lichen"],
               objects=["ski", "sled", "mitten"], readables=["avalanche report", "ski map"],
               topic_verbs=[("wax", "objects"), ("build", "places")], vehicles=["snowmobile"],
               vehicle_verbs=["glide"], routes=["ski trail"]),
}
# every person noun and name with its gender, over all topics (each topic has its own)
PEOPLE: dict[str, str] = {n: g for lex in TOPICS.values() for n, g in lex["people"].items()}
NAMES: dict[str, str] = {n: g for lex in TOPICS.values() for n, g in lex["names"].items()}
# mass nouns take the/some/my/..., never a/an or a plural
MASS = {"soup", "bread", "milk", "cheese", "corn", "hay", "grass", "grain", "lunch", "lettuce", "coffee",
        "plankton", "krill", "honey", "shrimp", "fish", "squid", "salmon"}


# ------------------------------------------------------------------ generator
def _np(noun: str, rng: random.Random, adjs: list[str] | None, number: str, dets_sg=("a", "the", "this", "that"),
        dets_pl=("the", "these", "those", "some", "two", "three"), adj_p=1.0) -> str:
    adj = rng.choice(adjs) if adjs and rng.random() < adj_p else None
    head = noun if number == "sg" else plural(noun)
    det = rng.choice(dets_sg if number == "sg" else dets_pl)
    first = adj or head
    if det == "a" and first[0] in "aeiou":
        det = "an"
    return " ".join(w for w in (det, adj, head) if w)


def _obj(rng: random.Random, noun: str, adjs=None) -> str:
    if noun in MASS:
        return f"{rng.choice(('the', 'some', 'my', 'her', 'his', 'fresh'))} {noun}"
    return _np(noun, rng, adjs, rng.choice(("sg", "sg", "pl")), dets_sg=("a", "the", "my", "her", "his"),
               dets_pl=("the", "some", "two", "many"))


def _loc(rng: random.Random, lex: dict, p: float = 0.85) -> str:
    if rng.random() >= p:
        return ""
    adj = f"{rng.choice(lex['adjs'])} "
    return f"{rng.choice(PREPS)} the {adj}{rng.choice(lex['places'])}"


def _frame(kind: str, number: str, lex: dict, rng: random.Random, avoid: int | None) -> tuple[int, str]:
    """One predicate for a subject of ``kind`` and ``number``; returns (frame id, text)."""
    v = lambda lemma: verb_forms(lemma)[0 if number == "sg" else 1]  # noqa: E731
    frames: list = []
    if kind == "person":
        frames = [
            lambda: f"{v('eat')} {_obj(rng, rng.choice(lex['food']), lex['adjs'])} {_loc(rng, lex)}",
            lambda: f"{v('read')} {_obj(rng, rng.choice(lex['readables']), lex['adjs'])} {_loc(rng, lex)}",
            lambda: f"{v('have')} {_obj(rng, rng.choice(lex['objects']), lex['adjs'])}",
            lambda: f"{v('be')} {rng.choice(lex['adjs'])} {_loc(rng, lex, 0.8)}",
            lambda: _topic_verb(rng, lex, v),
            lambda: _topic_verb(rng, lex, v),
            lambda: f"{v('walk')} to the {rng.choice(lex['places'])}",
        ]
    elif kind == "animal":
        frames = [
            lambda: f"{v('eat')} {_obj(rng, rng.choice(lex['animal_food']), lex['adjs'])} {_loc(rng, lex)}",
            lambda: f"{v(rng.choice(lex['animal_verbs']))} {_loc(rng, lex, 1.0)}",
            lambda: f"{v('be')} {rng.choice(lex['adjs'])} {_loc(rng, lex, 0.9)}",
        ]
    else:
        frames = [
            lambda: f"{v(rng.choice(lex['vehicle_verbs']))} {rng.choice(['along', 'across', 'down'])} "
                    f"the {rng.choice(lex['routes'])}",
            lambda: f"{v('stop')} near the {rng.choice(lex['places'])}",
            lambda: f"{v('be')} {rng.choice(lex['adjs'])} {_loc(rng, lex, 0.9)}",
        ]
    choices = [i for i in range(len(frames)) if i != avoid]
    i = rng.choice(choices)
    return i, " ".join(frames[i]().split())


def _topic_verb(rng: random.Random, lex: dict, v) -> str:
    lemma, kind = rng.choice(lex["topic_verbs"])
    noun = rng.choice(lex[kind])
    if kind in ("places", "routes"):
        return f"{v(lemma)} the {noun}"
    return f"{v(lemma)} {_obj(rng, noun)} {_loc(rng, lex, 0.9)}"


def _subject(rng: random.Random, lex: dict):
    """-> (kind, number, gender, noun phrase, referring expression for B)."""
    r = rng.random()
    if r < 0.5 or (r >= 0.8 and not lex["vehicles"]):
        if rng.random() < 0.35:
            name = rng.choice(sorted(lex["names"]))
            return "person", "sg", lex["names"][name], name, name
        noun = rng.choice(sorted(lex["people"]))
        number = rng.choice(("sg", "pl"))
        return "person", number, lex["people"][noun], _np(noun, rng, lex["adjs"], number), noun
    kind = "animal" if r < 0.8 else "vehicle"
    noun = rng.choice(lex["animals" if kind == "animal" else "vehicles"])
    number = rng.choice(("sg", "pl"))
    return kind, number, "n", _np(noun, rng, lex["adjs"], number), noun


def pronoun(kind: str, number: str, gender: str) -> str:
    if number == "pl":
        return "they"
    if kind == "person":
        return "he" if gender == "m" else "she"
    return "it"


def sentence(words: str) -> str:
    """Capitalised, with the final full stop."""
    return words[0].upper() + words[1:] + "."


@dataclass(frozen=True)
class LabelledPair:
    """One pair of the grammar with how it was made: the ground truth of the skill items
    (``bertcore.data.skill_items``). ``b == sentence(conn + ref_b + pred_b)``."""
    topic: str
    kind: str  # person | animal | vehicle
    number: str  # sg | pl
    gender: str  # m | f | n
    subject: str  # A's subject noun phrase
    ref: str  # the subject's head noun (singular) or name
    pred_a: str
    conn: str
    ref_b: str  # how B names the subject: a pronoun, "the NOUN(s)" or the name
    pred_b: str
    a: str
    b: str


def labelled_pair(rng: random.Random) -> LabelledPair:
    """The next pair the grammar draws from ``rng`` (the corpus is a sequence of these), with its parts."""
    ti = rng.randrange(len(TOPICS))
    topic = list(TOPICS)[ti]
    lex = TOPICS[topic]
    kind, number, gender, np_a, ref = _subject(rng, lex)
    fa, pred_a = _frame(kind, number, lex, rng, None)
    _, pred_b = _frame(kind, number, lex, rng, fa)
    if ref in lex["names"] and rng.random() < 0.5:
        ref_b = ref
    elif ref in lex["names"] or rng.random() < 0.3:
        ref_b = pronoun(kind, number, gender)
    else:
        ref_b = f"the {ref if number == 'sg' else plural(ref)}"
    conn = rng.choice(CONNECTIVES)
    a = f"{np_a} {pred_a}"
    b = " ".join(w for w in (conn, ref_b, pred_b) if w)
    return LabelledPair(topic, kind, number, gender, np_a, ref, pred_a, conn, ref_b, pred_b, sentence(a), sentence(b))


def _pair(rng: random.Random) -> tuple[int, str, str]:
    p = labelled_pair(rng)
    return list(TOPICS).index(p.topic), p.a, p.b


def distinct_pairs(draw, rng: random.Random, n_pairs: int,
                   too_few: Message) -> tuple[list[tuple[str, str]], list[int]]:
    """The pairs of a generated corpus (English here, Chinese in ``corpus_zh``): ``draw(rng)`` gives
    ``(document, a, b)``; a pair drawn before is skipped, so the first ``n_pairs`` distinct (a, b) are kept in the
    order drawn, with the document of each (BERT §3.2: a NotNext B comes from another document). After
    ``20 * n_pairs + 1000`` draws the grammar is taken to have no more: ``CorpusError(too_few)``."""
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    docs: list[int] = []
    draws = 0
    while len(pairs) < n_pairs:
        if draws == 20 * n_pairs + 1000:
            raise CorpusError(too_few)
        draws += 1
        doc, a, b = draw(rng)
        if (a, b) not in seen:
            seen.add((a, b))
            pairs.append((a, b))
            docs.append(doc)
    return pairs, docs


def builtin_corpus(seed: int = 0, n_pairs: int = 24000) -> Corpus:
    """The generated English corpus (grammar in this module's docstring); ``n_pairs`` distinct pairs.

    Memoized per (seed, n_pairs): treat the returned corpus as read-only.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or isinstance(n_pairs, bool) or not isinstance(n_pairs, int):
        raise CorpusError(Message("seed={seed} and n_pairs={n_pairs} must be whole numbers", seed=repr(seed),
                                  n_pairs=repr(n_pairs)))
    return _builtin_corpus(seed, n_pairs)


@functools.lru_cache(maxsize=4)
def _builtin_corpus(seed: int, n_pairs: int) -> Corpus:
    if not isinstance(n_pairs, int) or n_pairs < 2:
        raise CorpusError(Message("n_pairs={n_pairs} must be a whole number >= 2 (NSP needs other pairs for negatives)",
                                  n_pairs=repr(n_pairs)))
    pairs, docs = distinct_pairs(_pair, random.Random(seed), n_pairs,
                                 Message("could not generate {n} distinct pairs; ask for fewer", n=n_pairs))
    return Corpus(f"builtin(seed={seed})", pairs,
                  Message("generated English: {topics} topics (one document each), number agreement, selectional "
                          "constraints, {pairs} distinct sentence pairs (seed {seed})",
                          topics=len(TOPICS), pairs=len(pairs), seed=seed), documents=docs)


@dataclass(frozen=True)
class LabelledSentence:
    """One A sentence of the grammar with the facts a probe needs (``words`` end with "."; ``verb`` indexes them)."""
    words: tuple[str, ...]
    topic: str
    number: str  # the subject's number: "sg" | "pl"
    verb: int  # index in ``words`` of the verb that agrees with the subject
    subject: int  # index in ``words`` of the subject's head word (its last word)


def labelled_sentences(seed: int, n: int) -> list[LabelledSentence]:
    """``n`` A sentences (SUBJ_NP FRAME, see the module docstring) drawn from ``random.Random(seed)`` with their
    topic, subject number and verb index: the ground truth of the probes (``bertcore.analysis.probing``)."""
    rng = random.Random(seed)
    out = []
    for _ in range(int(n)):
        topic = list(TOPICS)[rng.randrange(len(TOPICS))]
        lex = TOPICS[topic]
        kind, number, _, np_a, _ = _subject(rng, lex)
        _, pred = _frame(kind, number, lex, rng, None)
        words = tuple(sentence(f"{np_a} {pred}")[:-1].split()) + (".",)
        k = len(np_a.split())
        out.append(LabelledSentence(words, topic, number, verb=k, subject=k - 1))
    return out


def word_categories() -> dict[str, str]:
    """The grammar's own lexicon as {lower-case word: category} (noun, name, verb, adjective, determiner,
    preposition, pronoun, punctuation). Words of two categories (``cook`` the person and ``cook`` the verb,
    ``milk``, ``bandage``...) are left out: their category depends on the sentence."""
    found: dict[str, set] = {}

    def add(words, cat):
        for w in words:
            for part in w.lower().split():
                found.setdefault(part, set()).add(cat)

    lemmas = {"eat", "read", "have", "be", "walk", "stop"}
    for lex in TOPICS.values():
        nouns = [*lex["people"], *lex["places"], *lex["food"], *lex["animals"], *lex["animal_food"],
                 *lex["objects"], *lex["readables"], *lex["vehicles"], *lex["routes"]]
        add(nouns + [plural(x) for x in nouns], "noun")
        add(lex["names"], "name")
        add(lex["adjs"] + ["fresh"], "adjective")
        lemmas |= {v for v, _ in lex["topic_verbs"]} | set(lex["animal_verbs"]) | set(lex["vehicle_verbs"])
    add([f for v in lemmas for f in verb_forms(v)], "verb")
    add(["a", "an", "the", "this", "that", "these", "those", "some", "two", "three", "my", "her", "his", "many"],
        "determiner")
    add(PREPS + ["to", "along", "across", "down", "near"], "preposition")
    add(["he", "she", "it", "they"], "pronoun")
    add(["."], "punctuation")
    return {w: next(iter(c)) for w, c in sorted(found.items()) if len(c) == 1}


def tutorial_corpus() -> Corpus:
    """The two-line tab-separated corpus of the BERT-pytorch data-pipeline tutorial."""
    return Corpus("tutorial", [("Welcome to the", "the jungle"), ("I can stay", "here all night")],
                  Message("the two-pair toy corpus from the BERT-pytorch tutorial"))


# ------------------------------------------------------------------ user files
def max_corpus_bytes() -> int:
    """Largest user corpus accepted, in bytes: env BERTCORE_MAX_CORPUS_BYTES (default ``MAX_CORPUS_BYTES``)."""
    try:
        return settings.whole("BERTCORE_MAX_CORPUS_BYTES")
    except ConfigError as e:
        raise CorpusError(reason(e)) from None


def too_large(name, size: int, limit: int) -> Message:
    """Why a file over the corpus size limit (``max_corpus_bytes``) is refused, and what to do."""
    return Message("{name} is {size} bytes, over the {limit}-byte limit; use a smaller file or raise the limit "
                   "with the environment variable BERTCORE_MAX_CORPUS_BYTES", name=str(name), size=f"{size:,}",
                   limit=f"{limit:,}")


def decode_text_file(data: bytes, name: str) -> str:
    limit = max_corpus_bytes()
    if len(data) > limit:
        raise CorpusError(too_large(name, len(data), limit))
    if not data.strip():
        raise CorpusError(Message("{name} is empty; give a UTF-8 text file with sentence pairs", name=name))
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise CorpusError(Message("{name} is UTF-16 text; re-save it as UTF-8 (e.g. 'Save as... UTF-8' in your "
                                  "editor) and upload it again", name=name))
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise CorpusError(Message("{name} looks binary (NUL byte on line {line}); give a UTF-8 text file",
                                  name=name, line=line))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise CorpusError(Message("{name} is not valid UTF-8 (bad byte {byte} on line {line}); re-save the file as "
                                  "UTF-8", name=name, byte=f"0x{data[e.start]:02x}", line=line)) from None
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def load_corpus_file(path_or_bytes, name: str | None = None, mode: str = "auto") -> Corpus:
    """Read a user's corpus.

    ``pairs`` mode: one ``A<TAB>B`` pair per line (blank lines skipped). ``prose`` mode: paragraphs
    (separated by blank lines) are split into sentences, and consecutive sentences of a paragraph form
    pairs. ``auto`` picks pairs if most non-empty lines hold a tab. Raises CorpusError with the fix.
    """
    if mode not in ("auto", "pairs", "prose"):
        raise CorpusError(Message("mode={mode} is unknown; use 'auto', 'pairs' or 'prose'", mode=repr(mode)))
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data, name = bytes(path_or_bytes), name or "uploaded file"
    else:
        p = Path(path_or_bytes)
        name = name or p.name
        try:
            size = p.stat().st_size
            if size > max_corpus_bytes():
                raise CorpusError(too_large(p, size, max_corpus_bytes()))
            data = p.read_bytes()
        except FileNotFoundError:
            raise CorpusError(Message("corpus file {path} not found; check the path (or use 'builtin' / 'tutorial')",
                                      path=str(p))) from None
        except IsADirectoryError:
            raise CorpusError(Message("{path} is a directory; pass a text file", path=str(p))) from None
        except OSError as e:
            raise CorpusError(Message("cannot read {path}: {err}", path=str(p), err=str(e))) from None
    text = decode_text_file(data, name)
    lines = text.split("\n")
    nonempty = [ln for ln in lines if ln.strip()]
    if mode == "auto":
        mode = "pairs" if sum("\t" in ln for ln in nonempty) * 2 > len(nonempty) else "prose"
    pairs: list[tuple[str, str]] = []
    docs: list[int] | None = None
    if mode == "pairs":
        for no, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            if "\t" not in ln:
                raise CorpusError(Message("{name} line {no} has no TAB; each line must be 'sentence A<TAB>sentence "
                                          "B' (or load the file as prose)", name=name, no=no))
            a, b = ln.split("\t", 1)
            a, b = a.strip(), b.strip()
            if is_blank(a) or is_blank(b):  # spaces and invisible characters only (bertcore.data.user_text)
                raise CorpusError(Message("{name} line {no} has an empty {side} side; put text on both sides of "
                                          "the TAB", name=name, no=no, side="A" if is_blank(a) else "B"))
            pairs.append((a, b))
    else:
        docs = []
        lang = detect_language(text)  # once per file: sentencex's rules for that language (segmentation.py)
        for doc_id, para in enumerate(re.split(r"\n\s*\n", text)):
            sents = split_sentences(para, lang)
            pairs.extend(zip(sents, sents[1:]))
            docs.extend([doc_id] * max(0, len(sents) - 1))
    if len(pairs) < 2:
        raise CorpusError(Message("{name} gives {n} sentence pair(s); at least 2 are needed because NSP draws its "
                                  "NotNext examples from a different pair. Add more lines (prose needs 2+ sentences "
                                  "per paragraph)", name=name, n=len(pairs)))
    meta = {"mode": mode} if mode == "pairs" else {"mode": mode, "language": lang}
    return Corpus(name, pairs, Message("{n} pairs from {name} ({mode} mode)", n=len(pairs), name=name, mode=mode),
                  meta=meta, documents=docs)


def suggested_vocab_size(corpus: Corpus) -> int:
    """The WordPiece vocabulary size offered for a user corpus: a quarter of its distinct words, rounded to
    100 and kept in [500, 4000]. Small enough that a tiny model's MLM softmax stays cheap, large enough that
    frequent words stay whole (the rest become ##pieces)."""
    words = {w for s in corpus.sentences()[:200_000] for w in basic_tokenize(s)}
    return int(min(4000, max(500, round(len(words) / 4 / 100) * 100)))


SHORT_MAX_SEQ_LEN = 28  # the upload default when pairs are long: a built-in batch pads to ~28 tokens


def suggested_max_seq_len(corpus: Corpus, tokenizer, default: int = 48, sample: int = 2000,
                          short: int = SHORT_MAX_SEQ_LEN) -> int:
    """The longest [CLS] A [SEP] B [SEP] offered for a user corpus: ``default`` when its median pair fits in
    ``short`` tokens, else ``short``. Long pairs are cut longest-sentence-first, so a
    step on real prose costs about what a built-in step costs (a built-in batch of 256 pads to ~28 tokens: its
    pairs are ~21 tokens long, the longest ~28; ``bertcore.data.corpus_defaults.short_max_seq_len`` makes ``short``
    shorter for a large vocabulary); BERT itself trained
    90% of its steps at length 128 instead of 512 for the same reason (§A.2). Raise it for more context."""
    pairs = corpus.pairs[::max(1, len(corpus.pairs) // sample)]  # spread over the whole corpus
    if not pairs:
        return default
    lengths = sorted(len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)) + 3 for a, b in pairs)
    return default if lengths[len(lengths) // 2] <= short else min(default, short)
