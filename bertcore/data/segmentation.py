"""Sentence segmentation of prose for pre-training pairs (BERT §3.1: documents are split into sentences,
and NSP pairs are consecutive sentences of a document, §3.2 / §A.2).

The splitting itself comes from the maintained library ``sentencex`` (Wikimedia; rules per language,
abbreviations, decimals, quotes after the final mark such as ``。”``), and the language from
``py3langid`` (a langid.py fork). A file is classified once from a sample of its text, then every
paragraph is split with that language's rules; docs/SEGMENTATION.md compares it with pysbd and the
old ASCII regex on tests/test_segmentation.py's texts.
"""
from __future__ import annotations

import functools
import re

import py3langid
from sentencex import segment

from bertcore.data.user_text import is_blank

DEFAULT_LANGUAGE = "en"
_SAMPLE_CHARS = 4000
# a line break between two CJK characters is no word break: join those lines without a space
_CJK_BREAK = re.compile(r"(?<=[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef])"
                        r"\s*\n\s*"
                        r"(?=[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef])")


@functools.lru_cache(maxsize=256)
def _classify(sample: str) -> str:
    lang, _score = py3langid.classify(sample)
    return lang


def detect_language(text: str) -> str:
    """ISO 639-1 code of the text's language (``py3langid`` on its first few thousand characters);
    ``DEFAULT_LANGUAGE`` for text with no letters."""
    sample = " ".join(text[:_SAMPLE_CHARS].split())
    if not any(ch.isalpha() for ch in sample):
        return DEFAULT_LANGUAGE
    return _classify(sample)


def normalise_paragraph(paragraph: str) -> str:
    """Collapse whitespace; line breaks inside CJK text vanish instead of becoming spaces."""
    return " ".join(_CJK_BREAK.sub("", paragraph).split())


def split_sentences(paragraph: str, lang: str | None = None) -> list[str]:
    """The sentences of one paragraph, stripped, blanks dropped. ``lang`` (ISO 639-1) picks sentencex's
    rules; None detects it from the paragraph itself."""
    text = normalise_paragraph(paragraph)
    if not text:
        return []
    lang = lang or detect_language(text)
    return [s.strip() for s in segment(lang, text) if not is_blank(s)]
