"""The built-in Chinese grammar corpus: generated, seeded sentence pairs (BERT §3.1 MLM, §3.2 NSP).

Like the English grammar (``bertcore.data.corpus``), a pair is two sentences about one *subject* in one
*topic* (厨房 kitchen, 农场 farm, 学校 school, 城市 city, 大海 sea, 森林 forest, 医院 hospital, 花园 garden,
太空 space, 雪山 snow mountain). Every content word belongs to one topic, so a random B from another pair
comes from another topic 90% of the time: NSP's signal. Chinese has no number agreement on verbs; its
agreement rule here is the **measure word (量词)** between a numeral or demonstrative and its noun::

    PAIR    := A B
    A       := SUBJ FRAME 。
    B       := [CONN] REF FRAME' 。            (same subject and topic, another frame)
    SUBJ    := NUM CL NOUN                     一只猫 两头牛 三位医生 (CL agrees with NOUN)
             | NAME                            王医生 (gendered, singular)
    REF     := 他 / 她 (a named person) | 他们 (people) | 它 / 它们 (one / several animals)
             | 这CL NOUN / 那CL NOUN (singular) | 这些NOUN / 那些NOUN (plural) | NAME
    CONN    := 后来 | 然后 | 每天 | 今天 | ""      (mostly none)

Frames put *selectional constraints* on the object (喝 takes drinks, 读 takes 书, an animal's verb fits it)::

    person : 在PLACEVERB_OBJ (a topic verb-object, e.g. 打针) | 有NUM CL THING | 在PLACE看见NUM CL ANIMAL
             | 每天VERB_OBJ | 很ADJ | 吃/喝NUM CL FOOD
    animal : 在PLACEANIMAL_VERB | 很ADJ | 吃ANIMAL_FOOD

So a masked measure word is predictable from its noun, a noun's characters from each other, an object
from its verb, a place from the topic; for NSP a true B shares A's topic and its pronoun agrees with A's
subject (gender, person/animal, one/several). Tokens are single characters (``has_cjk``: both tokenizers
split Han characters). Everything is drawn from ``random.Random(seed)``: the same seed gives the same corpus.
"""
from __future__ import annotations

import functools
import random

from bertcore.data.corpus import Corpus, distinct_pairs
from bertcore.errors import CorpusError
from bertcore.message import Message

# topic: people (noun, 量词), names (name, gender), places, animals (noun, 量词, verbs), things (noun, 量词),
# foods (noun, 量词, 吃/喝), verb-objects (bare, e.g. 打针), adjectives
TOPICS_ZH: dict[str, dict] = {
    "厨房": dict(people=[("厨师", "位"), ("妈妈", "位")], names=[("李厨师", "m"), ("小红", "f")],
               places=["厨房里", "餐厅里"], animals=[("猫", "只", ["睡觉", "抓老鼠"]), ("老鼠", "只", ["偷米", "跑"])],
               things=[("锅", "口"), ("碗", "个"), ("刀", "把")], foods=[("汤", "碗", "喝"), ("面", "碗", "吃")],
               vo=["做饭", "洗碗", "切菜"], adjs=["忙", "饿"], animal_food=["米", "肉"]),
    "农场": dict(people=[("农民", "位"), ("爷爷", "位")], names=[("张农民", "m"), ("小芳", "f")],
               places=["农场里", "田里"], animals=[("牛", "头", ["吃草", "耕地"]), ("马", "匹", ["跑", "拉车"]),
                                            ("鸡", "只", ["下蛋", "叫"])],
               things=[("车", "辆"), ("桶", "个")], foods=[("牛奶", "杯", "喝"), ("鸡蛋", "个", "吃")],
               vo=["种地", "喂鸡", "挤奶"], adjs=["累", "高兴"], animal_food=["草", "玉米"]),
    "学校": dict(people=[("老师", "位"), ("学生", "个")], names=[("王老师", "f"), ("小明", "m")],
               places=["教室里", "学校里"], animals=[("鸟", "只", ["唱歌", "飞"])],
               things=[("书", "本"), ("笔", "支"), ("桌子", "张")], foods=[("苹果", "个", "吃")],
               vo=["读书", "写字", "上课"], adjs=["认真", "聪明"], animal_food=["虫子"]),
    "城市": dict(people=[("司机", "位"), ("警察", "位")], names=[("赵司机", "m"), ("小丽", "f")],
               places=["街上", "商店里"], animals=[("狗", "条", ["叫", "散步"])],
               things=[("汽车", "辆"), ("手机", "部"), ("房子", "座")], foods=[("咖啡", "杯", "喝")],
               vo=["开车", "买东西", "坐地铁"], adjs=["快乐", "着急"], animal_food=["骨头"]),
    "大海": dict(people=[("渔夫", "位"), ("水手", "个")], names=[("陈渔夫", "m"), ("小海", "m")],
               places=["海边", "船上"], animals=[("鱼", "条", ["游泳", "吐泡泡"]), ("螃蟹", "只", ["爬", "挖沙"])],
               things=[("船", "艘"), ("网", "张")], foods=[("海鲜", "盘", "吃")],
               vo=["钓鱼", "撒网", "开船"], adjs=["勇敢", "黑"], animal_food=["小虾"]),
    "森林": dict(people=[("猎人", "位"), ("护林员", "位")], names=[("刘猎人", "m"), ("小林", "f")],
               places=["森林里", "山洞里"], animals=[("熊", "只", ["爬树", "找蜂蜜"]), ("蛇", "条", ["爬", "睡觉"]),
                                              ("鹿", "只", ["跳", "跑"])],
               things=[("树", "棵"), ("斧头", "把")], foods=[("蘑菇", "朵", "吃")],
               vo=["砍树", "打猎", "采果子"], adjs=["强壮", "安静"], animal_food=["果子", "叶子"]),
    "医院": dict(people=[("医生", "位"), ("护士", "位")], names=[("周医生", "m"), ("小兰", "f")],
               places=["医院里", "病房里"], animals=[("兔子", "只", ["打针", "休息"])],
               things=[("药箱", "个"), ("床", "张")], foods=[("药", "片", "吃"), ("水", "杯", "喝")],
               vo=["看病", "打针", "开药"], adjs=["温柔", "细心"], animal_food=["胡萝卜"]),
    "花园": dict(people=[("园丁", "位"), ("奶奶", "位")], names=[("孙园丁", "m"), ("小花", "f")],
               places=["花园里", "草地上"], animals=[("蝴蝶", "只", ["飞", "跳舞"]), ("蜜蜂", "只", ["采蜜", "飞"])],
               things=[("花", "朵"), ("草帽", "顶")], foods=[("茶", "杯", "喝")],
               vo=["浇花", "种花", "剪草"], adjs=["开心", "美丽"], animal_food=["花蜜"]),
    "太空": dict(people=[("宇航员", "位"), ("科学家", "位")], names=[("杨宇航员", "m"), ("小星", "f")],
               places=["飞船里", "月球上"], animals=[("机器狗", "只", ["走路", "发光"])],
               things=[("飞船", "艘"), ("望远镜", "台")], foods=[("太空餐", "份", "吃")],
               vo=["看星星", "修飞船", "做实验"], adjs=["勇敢", "好奇"], animal_food=["电池"]),
    "雪山": dict(people=[("登山者", "位"), ("向导", "位")], names=[("高向导", "m"), ("小雪", "f")],
               places=["雪山上", "木屋里"], animals=[("狼", "只", ["叫", "追"]), ("雪豹", "只", ["爬山", "躲"])],
               things=[("雪橇", "个"), ("绳子", "根")], foods=[("热汤", "碗", "喝")],
               vo=["滑雪", "堆雪人", "爬山"], adjs=["冷", "累"], animal_food=["羊肉"]),
}
WRONG_MEASURE_WORDS = ["本", "辆", "棵", "匹", "艘", "杯"]  # each fits only its own nouns (书, 车, 树, 马, 船, drinks)
NUMS_SG, NUMS_PL = ["一"], ["两", "三", "几"]
CONNECTIVES_ZH = ["后来", "然后", "每天", "今天"] + [""] * 8


def _subject(rng: random.Random, lex: dict):
    """(kind, number, gender, A's subject phrase, (noun, cl) or name)."""
    r = rng.random()
    if r < 0.3:
        name, g = rng.choice(lex["names"])
        return "person", "sg", g, name, name
    number = "sg" if rng.random() < 0.6 else "pl"
    num = rng.choice(NUMS_SG if number == "sg" else NUMS_PL)
    if r < 0.55:
        noun, cl = rng.choice(lex["people"])
        return "person", number, "m", f"{num}{cl}{noun}", (noun, cl)
    noun, cl, _ = rng.choice(lex["animals"])
    return "animal", number, "n", f"{num}{cl}{noun}", (noun, cl)


def _reference(rng: random.Random, kind: str, number: str, gender: str, head) -> str:
    """B's subject: a pronoun that agrees with A's subject, a demonstrative phrase, or the name again."""
    if isinstance(head, str):  # a name
        return head if rng.random() < 0.4 else ("他" if gender == "m" else "她")
    noun, cl = head
    r = rng.random()
    if r < 0.5:
        return ("他们" if number == "pl" else "他") if kind == "person" else ("它们" if number == "pl" else "它")
    dem = rng.choice("这那")
    return f"{dem}{cl}{noun}" if number == "sg" else f"{dem}些{noun}"


def _frame(rng: random.Random, kind: str, lex: dict, avoid: int | None, head) -> tuple[int, str]:
    while True:
        if kind == "person":
            f = rng.choice([0, 0, 1, 2, 3, 4, 5])
        else:
            f = rng.choice([6, 6, 7, 8])
        if f != avoid:
            break
    place = rng.choice(lex["places"])
    if f == 0:
        return f, f"在{place}{rng.choice(lex['vo'])}"
    if f == 1:
        noun, cl = rng.choice(lex["things"])
        return f, f"有{rng.choice(NUMS_SG + NUMS_PL)}{cl}{noun}"
    if f == 2:
        noun, cl, _ = rng.choice(lex["animals"])
        return f, f"在{place}看见{rng.choice(NUMS_SG + NUMS_PL)}{cl}{noun}"
    if f == 3:
        return f, f"每天{rng.choice(lex['vo'])}"
    if f in (4, 7):
        return f, f"很{rng.choice(lex['adjs'])}"
    if f == 5:
        noun, cl, verb = rng.choice(lex["foods"])
        return f, f"{verb}{rng.choice(NUMS_SG + NUMS_PL)}{cl}{noun}"
    verbs = next(v for n, _, v in lex["animals"] if n == head[0])
    if f == 6:
        return f, f"在{place}{rng.choice(verbs)}"
    return f, f"吃{rng.choice(lex['animal_food'])}"


def _pair(rng: random.Random) -> tuple[int, str, str]:
    ti = rng.randrange(len(TOPICS_ZH))
    lex = TOPICS_ZH[list(TOPICS_ZH)[ti]]
    kind, number, gender, np_a, head = _subject(rng, lex)
    fa, pred_a = _frame(rng, kind, lex, None, head)
    _, pred_b = _frame(rng, kind, lex, fa, head)
    ref = _reference(rng, kind, number, gender, head)
    conn = rng.choice(CONNECTIVES_ZH)
    conn = "" if conn in pred_b else conn  # no 每天……每天
    return ti, f"{np_a}{pred_a}。", f"{conn}{ref}{pred_b}。"


def builtin_zh_corpus(seed: int = 0, n_pairs: int = 24000) -> Corpus:
    """The generated Chinese corpus (grammar in this module's docstring); ``n_pairs`` distinct pairs, one
    document per topic. Memoized per (seed, n_pairs): treat the returned corpus as read-only."""
    if isinstance(seed, bool) or not isinstance(seed, int) or isinstance(n_pairs, bool) or not isinstance(n_pairs, int):
        raise CorpusError(Message("seed={seed} and n_pairs={n_pairs} must be whole numbers", seed=repr(seed),
                                  n_pairs=repr(n_pairs)))
    if n_pairs < 2:
        raise CorpusError(Message("n_pairs={n_pairs} must be >= 2 (NSP needs other pairs for negatives)",
                                  n_pairs=repr(n_pairs)))
    return _builtin_zh_corpus(seed, n_pairs)


@functools.lru_cache(maxsize=4)
def _builtin_zh_corpus(seed: int, n_pairs: int) -> Corpus:
    pairs, docs = distinct_pairs(_pair, random.Random(seed), n_pairs,
                                 Message("could not generate {n} distinct Chinese pairs; ask for fewer", n=n_pairs))
    return Corpus(f"builtin-zh(seed={seed})", pairs,
                  Message("generated Chinese: {topics} topics (one document each), measure-word agreement, "
                          "selectional constraints, {pairs} distinct sentence pairs (seed {seed})",
                          topics=len(TOPICS_ZH), pairs=len(pairs), seed=seed),
                  meta={"language": "zh"}, documents=docs)


def measure_words() -> dict[str, str]:
    """Every noun of the grammar -> its one measure word (量词)."""
    out: dict[str, str] = {}
    for lex in TOPICS_ZH.values():
        for noun, cl, *_ in lex["people"] + lex["animals"] + lex["things"] + lex["foods"]:
            out.setdefault(noun, cl)
    return out


def skill_items(seed: int, n: int) -> dict[str, list[tuple[str, str, str]]]:
    """Probe items with one right answer each: {skill: [(text with one [MASK], right, wrong), ...]}.

    measure word: 看见一[MASK]猫 (only 猫's 量词 fits); selection: 喝一杯[MASK] vs a food that is eaten;
    topic: a topic person sees an animal of their own topic vs one of another topic with the same 量词.
    Right and wrong answers are single characters (one token). No item equals a training sentence:
    the texts hold [MASK].
    """
    rng = random.Random(10_000 + seed)
    cls = measure_words()
    one_char = {nn: c for nn, c in cls.items() if len(nn) == 1}
    topics = list(TOPICS_ZH)
    items: dict[str, list[tuple[str, str, str]]] = {"measure word": [], "selection": [], "topic": []}
    for _ in range(n):
        lex = TOPICS_ZH[rng.choice(topics)]
        name, _g = rng.choice(lex["names"])
        noun, cl, _ = rng.choice(lex["animals"] + [t + (None,) for t in lex["things"]])
        wrong = rng.choice([c for c in WRONG_MEASURE_WORDS if c != cl])
        items["measure word"].append((f"{name}在{lex['places'][0]}看见一[MASK]{noun}。", cl, wrong))
        drinks = [f for f, _, v in (x for t in TOPICS_ZH.values() for x in t["foods"]) if v == "喝" and len(f) == 1]
        eats = [f for f, _, v in (x for t in TOPICS_ZH.values() for x in t["foods"]) if v == "吃" and len(f) == 1]
        d, e = rng.choice(drinks), rng.choice(eats)
        if rng.random() < 0.5:
            items["selection"].append((f"{name}喝一{cls[d]}[MASK]。", d, e))
        else:
            items["selection"].append((f"{name}吃一{cls[e]}[MASK]。", e, d))
        mine = [a for a, c, _ in lex["animals"] if a in one_char]
        right = rng.choice(mine) if mine else None
        others = [a for t in TOPICS_ZH.values() if t is not lex for a, c, _ in t["animals"]
                  if a in one_char and right and c == one_char[right]]
        if right and others:
            items["topic"].append((f"{name}在{lex['places'][0]}看见一{one_char[right]}[MASK]。", right,
                                   rng.choice(others)))
    return items
