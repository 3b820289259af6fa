"""Built-in corpus properties and user-file loading errors."""
import re
from collections import Counter

import pytest

from bertcore.data.corpora import get_corpus

from bertcore.data import corpus as corpus_mod
from bertcore.data.corpus import (NAMES, PEOPLE, TOPICS, builtin_corpus, load_corpus_file, plural,
                             tutorial_corpus, verb_forms)
from bertcore.errors import CorpusError
from bertcore.data.tokenization import basic_tokenize

SG_DETS = {"a", "an", "this", "that"}
PL_DETS = {"these", "those", "some", "two", "three"}


@pytest.fixture(scope="module")
def corpus():
    return builtin_corpus()


def _nouns():
    sg = set(PEOPLE)
    for lex in TOPICS.values():
        sg |= set(lex["animals"]) | {v for v in lex["vehicles"] if " " not in v}
    return sg, {plural(n) for n in sg}


def _verbs():
    lemmas = {"eat", "read", "have", "be", "walk", "sleep", "hide", "play", "stop"}
    for lex in TOPICS.values():
        lemmas |= {v for v, _ in lex["topic_verbs"]} | set(lex["vehicle_verbs"]) | set(lex["animal_verbs"])
    return {verb_forms(v)[0] for v in lemmas}, {verb_forms(v)[1] for v in lemmas}


def test_size_distinct_and_vocab(corpus):
    assert len(corpus) == 24000
    assert len(set(corpus.pairs)) >= 20000
    words = Counter(w for s in corpus.sentences() for w in basic_tokenize(s))
    assert 250 <= len(words) <= 700  # a few hundred: ~680 over 10 topics
    lengths = [len(s.split()) for s in corpus.sentences()]
    assert min(lengths) >= 3 and max(lengths) <= 13
    assert sum(4 <= n <= 12 for n in lengths) / len(lengths) > 0.97
    assert corpus.sentences()[:2] == list(corpus.pairs[0]) and corpus.texts() == corpus.sentences()


def test_deterministic_by_seed():
    a, b, c = builtin_corpus(seed=3, n_pairs=500), builtin_corpus(seed=3, n_pairs=500), builtin_corpus(seed=4, n_pairs=500)
    assert a.pairs == b.pairs
    assert a.pairs != c.pairs
    assert builtin_corpus(n_pairs=300).pairs == builtin_corpus(n_pairs=24000).pairs[:300]


def test_number_agreement_and_determiners(corpus):
    sg_nouns, pl_nouns = _nouns()
    sg_verbs, pl_verbs = _verbs()
    checked = Counter()
    for s in corpus.sentences():
        w = basic_tokenize(s)
        for i in range(len(w) - 1):
            if w[i] in sg_nouns and (w[i - 1] in SG_DETS or i >= 2 and w[i - 2] in SG_DETS) and w[i + 1] in sg_verbs | pl_verbs:
                assert w[i + 1] in sg_verbs, s
                checked["sg"] += 1
            if w[i] in pl_nouns and w[i + 1] in sg_verbs | pl_verbs:
                assert w[i + 1] in pl_verbs, s
                checked["pl"] += 1
        if w[0] in ("he", "she", "it") or w[0].capitalize() in NAMES:
            assert w[1] in sg_verbs, s
        if "they" in w[:3]:
            assert w[w.index("they") + 1] in pl_verbs, s
        for i in range(len(w) - 1):  # a/an agree with the next word's first sound
            if w[i] == "a":
                assert w[i + 1][0] not in "aeiou", s
            if w[i] == "an":
                assert w[i + 1][0] in "aeiou", s
            if w[i] in PL_DETS:
                assert w[i + 1] not in sg_nouns, s
    assert checked["sg"] > 3000 and checked["pl"] > 3000
    # the example from the brief
    the_dogs = [s for s in corpus.sentences() if s.lower().startswith("the dogs ")]
    assert the_dogs and all(s.split()[2] in pl_verbs for s in the_dogs)


def test_selectional_constraints(corpus):
    animal_food = {f for lex in TOPICS.values() for f in lex["animal_food"]}
    human_food = {f for lex in TOPICS.values() for f in lex["food"]}
    animals = {a for lex in TOPICS.values() for a in lex["animals"]}
    animals |= {plural(a) for a in animals}
    people = set(PEOPLE) | {plural(p) for p in PEOPLE} | {n.lower() for n in NAMES}
    n = 0
    for s in corpus.sentences():
        w = basic_tokenize(s)
        if w[-1] == "." and ("eats" in w or "eat" in w):
            subj = [x for x in w[: w.index("eats" if "eats" in w else "eat")] if x in animals | people]
            food = [x.rstrip("s") for x in w if x.rstrip("s") in animal_food | human_food or x in animal_food | human_food]
            if subj and subj[0] in people and food:
                assert not (set(food) & animal_food - human_food), s
                n += 1
    assert n > 1000


def test_nsp_continuations_share_topic_and_subject(corpus):
    topic_words = {}
    for t, lex in TOPICS.items():
        for key in ("places", "food", "animals", "animal_food", "objects", "readables", "vehicles", "routes"):
            for x in lex[key]:
                for part in x.split():
                    topic_words.setdefault(part, set()).add(t)
    same = diff = 0
    for a, b in corpus.pairs[:3000]:
        ta = set().union(*(topic_words.get(x, set()) for x in basic_tokenize(a)))
        tb = set().union(*(topic_words.get(x, set()) for x in basic_tokenize(b)))
        if ta and tb:
            same += bool(ta & tb)
            diff += not (ta & tb)
    assert same > 0.95 * (same + diff)
    for a, b in corpus.pairs[:3000]:
        wb = basic_tokenize(b)
        if "they" in wb[:3]:
            assert any(x in _nouns()[1] for x in basic_tokenize(a)), (a, b)


def test_tutorial_corpus():
    c = tutorial_corpus()
    assert c.pairs == [("Welcome to the", "the jungle"), ("I can stay", "here all night")]
    assert get_corpus("tutorial").pairs == c.pairs and len(get_corpus("builtin")) == 24000


def test_pairs_file_crlf_bom(tmp_path):
    p = tmp_path / "c.tsv"
    p.write_bytes("\ufeffHello there.\tGeneral Kenobi.\r\n\r\nA\tB\r\nC c\tD d\r\n".encode("utf-8"))
    c = load_corpus_file(p)
    assert c.pairs == [("Hello there.", "General Kenobi."), ("A", "B"), ("C c", "D d")]
    assert get_corpus(str(p)).pairs == c.pairs
    assert load_corpus_file(p.read_bytes(), name="up").name == "up"


def test_prose_mode(tmp_path):
    text = "The cat sat. It was happy! Was it?\n\nA new paragraph here. And another one.\nSame paragraph."
    c = load_corpus_file(text.encode(), mode="auto")
    assert c.pairs == [("The cat sat.", "It was happy!"), ("It was happy!", "Was it?"),
                       ("A new paragraph here.", "And another one."), ("And another one.", "Same paragraph.")]


@pytest.mark.parametrize("data, pattern", [
    (b"", "empty"),
    (b"  \n\n", "empty"),
    (b"a\tb\nc\x00d\te\n", "binary.*line 2"),
    (b"a\tb\nc\td\nok\t\xff\xfe bad\n", "UTF-8.*line 3"),
    (b"a\tb\nno tab here\n c\td\ne\tf\n", "line 2 has no TAB"),
    (b"a\tb\n\t right\nc\td\n", "line 2 has an empty A"),
    (b"only\tone\n", "at least 2"),
    (b"Just one sentence here.", "at least 2"),
])
def test_errors(data, pattern):
    with pytest.raises(CorpusError, match=pattern):
        load_corpus_file(data, mode="pairs" if b"no tab" in data else "auto")


def test_oversize_and_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTCORE_MAX_CORPUS_BYTES", "50")
    p = tmp_path / "big.txt"
    p.write_text("a\tb\n" * 100, encoding="utf-8")
    with pytest.raises(CorpusError, match="BERTCORE_MAX_CORPUS_BYTES"):
        load_corpus_file(p)
    with pytest.raises(CorpusError, match="limit"):
        load_corpus_file(p.read_bytes())
    monkeypatch.delenv("BERTCORE_MAX_CORPUS_BYTES")
    assert len(load_corpus_file(p)) == 100
    assert corpus_mod.MAX_CORPUS_BYTES == 5 * 1024 * 1024
    with pytest.raises(CorpusError, match="not found"):
        get_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(CorpusError, match="mode"):
        load_corpus_file(b"a\tb\nc\td", mode="poetry")


def test_sentence_format(corpus):
    assert all(re.fullmatch(r"[A-Z][A-Za-z ]+\.", s) for s in corpus.sentences())


def test_suggested_max_seq_len_shortens_long_pairs_only():
    """Long prose pairs get SHORT_MAX_SEQ_LEN (a step as cheap as a built-in one); short pairs keep the default."""
    from bertcore.data.corpus import SHORT_MAX_SEQ_LEN, Corpus, suggested_max_seq_len
    from bertcore.data.tokenization import WordTokenizer

    b = builtin_corpus()
    assert suggested_max_seq_len(b, WordTokenizer.build(b.texts())) == 48  # median pair ~21 tokens
    long_text = " ".join(f"word{i % 50}" for i in range(20))
    c = Corpus("long", [(long_text, long_text)] * 30)
    tok = WordTokenizer.build(c.texts())
    assert suggested_max_seq_len(c, tok) == SHORT_MAX_SEQ_LEN
    assert suggested_max_seq_len(c, tok, default=24) == 24  # never longer than the default
    assert suggested_max_seq_len(Corpus("empty", []), tok) == 48


def test_distinct_pairs_keeps_each_pair_once_in_the_order_drawn():
    """The one generator of both built-in corpora (corpus_zh uses it too): a repeat is skipped, the documents follow
    their pairs; a grammar with too few pairs is the caller's error after 20 * n + 1000 draws, never a hang."""
    from bertcore.message import Message

    drawn = iter([(0, "a", "b"), (1, "c", "d"), (0, "a", "b"), (2, "a", "x"), (3, "y", "z")])
    pairs, docs = corpus_mod.distinct_pairs(lambda rng: next(drawn), None, 3, Message("too few"))
    assert pairs == [("a", "b"), ("c", "d"), ("a", "x")] and docs == [0, 1, 2]
    assert next(drawn) == (3, "y", "z")  # it stopped drawing at the third distinct pair

    draws = []
    with pytest.raises(CorpusError, match="could not make 2 pairs"):
        corpus_mod.distinct_pairs(lambda rng: draws.append(rng) or (0, "a", "b"), "the rng", 2,
                                  Message("could not make {n} pairs", n=2))
    assert len(draws) == 20 * 2 + 1000 and set(draws) == {"the rng"}
