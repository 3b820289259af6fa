"""Sentence segmentation of prose uploads (bertcore.data.segmentation: sentencex + py3langid).

Each text has a hand-made oracle: the sentences a reader sees. docs/SEGMENTATION.md scores the same
texts for sentencex, pysbd and the old ASCII regex.
"""
import pytest

from bertcore.data.corpus import load_corpus_file
from bertcore.data.segmentation import detect_language, split_sentences

CASES = {
    "zh": ("他说：“我们明天去北京。”她没有回答。天气很冷！你要一起去吗？",
           ["他说：“我们明天去北京。”", "她没有回答。", "天气很冷！", "你要一起去吗？"]),
    "zh-hant": ("他說：「我們明天去臺北。」她沒有回答。天氣很冷！你要一起去嗎？",
                ["他說：「我們明天去臺北。」", "她沒有回答。", "天氣很冷！", "你要一起去嗎？"]),
    "ja": ("今日は雨が降っています。明日は晴れるでしょう！本当ですか？",
           ["今日は雨が降っています。", "明日は晴れるでしょう！", "本当ですか？"]),
    "en": ("Dr. Smith paid 3.50 dollars for the tea. He left at 5 p.m. on Monday. Did he come back?",
           ["Dr. Smith paid 3.50 dollars for the tea.", "He left at 5 p.m. on Monday.", "Did he come back?"]),
    "de": ("Das Wetter ist heute schön. Wir gehen z. B. in den Park. Kommst du mit?",
           ["Das Wetter ist heute schön.", "Wir gehen z. B. in den Park.", "Kommst du mit?"]),
    "ru": ("Сегодня хорошая погода. Мы идём в парк! Ты пойдёшь с нами?",
           ["Сегодня хорошая погода.", "Мы идём в парк!", "Ты пойдёшь с нами?"]),
    "ar": ("هل أنت بخير؟ نعم أنا بخير. سنذهب إلى السوق غدا.",
           ["هل أنت بخير؟", "نعم أنا بخير.", "سنذهب إلى السوق غدا."]),
    "hi": ("मैं घर जा रहा हूँ। तुम कहाँ हो? कल बारिश होगी।",
           ["मैं घर जा रहा हूँ।", "तुम कहाँ हो?", "कल बारिश होगी।"]),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_split_matches_the_readers_sentences(key):
    text, want = CASES[key]
    assert split_sentences(text) == want


@pytest.mark.parametrize("key,lang", [("zh", "zh"), ("ja", "ja"), ("en", "en"), ("de", "de"), ("ru", "ru"),
                                      ("ar", "ar"), ("hi", "hi")])
def test_language_detection(key, lang):
    assert detect_language(CASES[key][0]) == lang


def test_line_breaks_inside_chinese_do_not_become_spaces():
    assert split_sentences("床前明月光，\n疑是地上霜。\n举头望明月，\n低头思故乡。") == \
        ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。"]


def test_chinese_prose_upload_gives_pairs_per_paragraph():
    paras = ["春眠不觉晓。处处闻啼鸟。夜来风雨声。花落知多少。", "白日依山尽。黄河入海流。欲穷千里目。更上一层楼。"]
    c = load_corpus_file("\n\n".join(paras).encode("utf-8"), name="poems.txt")
    assert len(c) == 6 and c.documents == [0, 0, 0, 1, 1, 1]
    assert c.pairs[0] == ("春眠不觉晓。", "处处闻啼鸟。")
    assert c.meta["language"] == "zh"


def test_english_upload_keeps_abbreviations_whole():
    c = load_corpus_file(b"Mr. Brown met Dr. Lee at 3.15 p.m. today. They talked. Then they left.", name="e.txt")
    assert c.pairs == [("Mr. Brown met Dr. Lee at 3.15 p.m. today.", "They talked."), ("They talked.", "Then they left.")]
