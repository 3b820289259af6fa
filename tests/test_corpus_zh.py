"""The built-in Chinese grammar (bertcore.data.corpus_zh): measure-word agreement, pronoun agreement across
the pair, determinism by seed, skill items with one right answer, the corpus registry, a training smoke test."""
import re

import torch

from bertcore.config import BertConfig, TrainConfig
from bertcore.data.corpora import get_corpus, is_builtin_spec, spec_language
from bertcore.data.corpus_zh import TOPICS_ZH, WRONG_MEASURE_WORDS, builtin_zh_corpus, measure_words, skill_items
from bertcore.data.tokenization import WordTokenizer
from bertcore.training.trainer import Trainer

CL = measure_words()
NOUNS = sorted(CL, key=len, reverse=True)
NUM_CL_NOUN = re.compile("([一两三几这那])(.)(" + "|".join(NOUNS) + ")")


def test_every_numeral_or_demonstrative_phrase_uses_its_nouns_measure_word():
    c = builtin_zh_corpus(seed=3, n_pairs=3000)
    checked = 0
    for a, b in c.pairs:
        for s in (a, b):
            for _num, cl, noun in NUM_CL_NOUN.findall(s):
                if cl == "些":
                    continue
                assert cl == CL[noun], (s, noun, cl)
                checked += 1
    assert checked > 3000
    assert {"一只猫", "两本书", "一条鱼", "一辆车"} & {m.group(0) for s in c.sentences() for m in NUM_CL_NOUN.finditer(s)}


def test_pronoun_agrees_with_a_named_persons_gender_and_an_animals_number():
    gender = {n: g for lex in TOPICS_ZH.values() for n, g in lex["names"]}
    animals = {a for lex in TOPICS_ZH.values() for a, _, _ in lex["animals"]}
    for a, b in builtin_zh_corpus(seed=1, n_pairs=3000).pairs:
        name = next((n for n in gender if a.startswith(n)), None)
        if name and ("他" in b[:4] or "她" in b[:4]):
            assert ("他" if gender[name] == "m" else "她") in b[:4], (a, b)
        m = re.match("([一两三几])(.)(" + "|".join(sorted(animals, key=len, reverse=True)) + ")", a)
        if m and b.lstrip("后来然每天今").startswith("它"):
            assert b.lstrip("后来然每天今").startswith("它们") == (m.group(1) != "一"), (a, b)


def test_same_seed_same_corpus_and_documents_are_topics():
    a, b = builtin_zh_corpus(seed=5, n_pairs=500), builtin_zh_corpus(seed=5, n_pairs=500)
    assert a.pairs == b.pairs and a.pairs != builtin_zh_corpus(seed=6, n_pairs=500).pairs
    assert set(a.documents) == set(range(len(TOPICS_ZH)))
    assert len(set(a.pairs)) == 500 and all(x.endswith("。") and y.endswith("。") for x, y in a.pairs)


def test_registry_routes_builtin_zh():
    assert get_corpus("builtin-zh").pairs == builtin_zh_corpus().pairs
    assert get_corpus("builtin-zh:2").pairs == builtin_zh_corpus(seed=2).pairs
    assert is_builtin_spec("builtin-zh") and is_builtin_spec("builtin-zh:4") and not is_builtin_spec("x.txt")
    assert spec_language("builtin-zh:4") == "zh" and spec_language("builtin") == "en"


def test_skill_items_have_one_right_single_character_answer():
    items = skill_items(0, 60)
    sents = set(builtin_zh_corpus().sentences())
    for skill in ("measure word", "selection", "topic"):
        assert len(items[skill]) >= 20, skill
        for text, right, wrong in items[skill]:
            assert text.count("[MASK]") == 1 and len(right) == 1 and len(wrong) == 1 and right != wrong
            assert text not in sents and text.replace("[MASK]", right) != text
    for text, right, wrong in items["measure word"]:
        noun = text.split("[MASK]")[1].rstrip("。")
        assert CL[noun] == right and wrong in WRONG_MEASURE_WORDS
    assert skill_items(0, 10) == skill_items(0, 10)


def test_a_short_training_run_learns_more_than_the_unigram_baseline():
    torch.set_num_threads(1)
    corpus = builtin_zh_corpus(seed=0, n_pairs=2000)
    tok = WordTokenizer.build(corpus.texts())
    assert all(len(t) == 1 or t.startswith("[") for t in tok.vocab)  # one Han character per token
    tr = Trainer(BertConfig(), TrainConfig(steps=120, eval_every=120, seed=0), corpus, tok)
    last = None
    while not tr.done:
        last = tr.step()
    assert last["eval_mlm_acc"] > 1.5 * tr.unigram_baseline
