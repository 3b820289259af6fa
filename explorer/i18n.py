"""The app's languages: English and 简体中文, with gettext message catalogues (Babel).

Every text the app shows goes through ``tr("English text {name}", name=...)`` (or ``ntr`` for a plural). The
English text is the message id; ``locale/zh_Hans/LC_MESSAGES/messages.po`` holds its Chinese translation. The
catalogue is read with Babel and compiled in memory when the server first needs it (``gettext.GNUTranslations``
over Babel's ``write_mo``), so there is no compile step: the README's two commands are all it takes.

Workflow for a developer who adds or changes a text (scripts/i18n.sh runs both)::

    pybabel extract -F babel.cfg -k tr -k ntr:1,2 -k mark -k Message --no-location -o locale/messages.pot .
    pybabel update -i locale/messages.pot -d locale -l zh_Hans --no-fuzzy-matching

Texts bertcore writes (``bertcore.message.Message``) are extracted too and translated by ``tr(message)``.
Then translate the new entries in messages.po; tests/test_i18n.py fails on any message without a translation.

The language is the session's choice (the sidebar's switch, kept in the URL as ``?lang=zh`` and across pages and
reloads); code outside a page (a test, a figure built for an export) can fix it with ``using(lang)``. Formulas
stay LaTeX and code names stay as they are; the CLI stays English. Terms follow docs/GLOSSARY.md.
"""
from __future__ import annotations

import contextlib
import functools
import gettext
import io
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import streamlit as st
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from bertcore.message import Message

LANGUAGES = {"en": "English", "zh": "简体中文"}
LOCALES = {"zh": "zh_Hans"}  # the app's language code -> the catalogue's folder under locale/
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
DOMAIN = "messages"
LANG_KEY = "bx_lang"  # the session's language (st.session_state); ?lang= in the URL
LANG_PARAM = "lang"

_override = threading.local()


def catalogue_path(lang: str) -> Path:
    return LOCALE_DIR / LOCALES[lang] / "LC_MESSAGES" / f"{DOMAIN}.po"


@functools.lru_cache(maxsize=len(LANGUAGES))
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalogue of ``lang`` (English: the message ids themselves)."""
    if lang not in LOCALES:
        return gettext.NullTranslations()
    with catalogue_path(lang).open("rb") as f:
        catalog = read_po(f, locale=LOCALES[lang], domain=DOMAIN)
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return gettext.GNUTranslations(buf)


@contextlib.contextmanager
def using(lang: str):
    """Fix the language of ``tr`` in this thread for the block (tests, exports), whatever the session says."""
    old = getattr(_override, "lang", None)
    _override.lang = lang if lang in LANGUAGES else "en"
    try:
        yield
    finally:
        _override.lang = old


def language() -> str:
    """The language texts are shown in: a ``using`` block's, else this session's, else English."""
    fixed = getattr(_override, "lang", None)
    if fixed is not None:
        return fixed
    try:
        lang = st.session_state.get(LANG_KEY, "en")
    except Exception:  # noqa: BLE001 - no Streamlit session (a script, a test): English
        return "en"
    return lang if lang in LANGUAGES else "en"


def mark(message: str) -> str:
    """Mark a text for the catalogue where it is defined (a table of titles) and translate it where it is shown,
    with ``tr(variable)``."""
    return message


def tr(message: str, **values) -> str:
    """``message`` in the session's language, with ``{name}`` fields filled from ``values``. A
    ``bertcore.message.Message`` (a text bertcore wrote) is translated from its template and filled with its own
    values; a value that is a Message is translated too. An empty text stays empty (gettext would give the
    catalogue's header)."""
    if not message:
        return message
    if isinstance(message, Message):
        values = {**message.values, **values}
        message = message.template
    values = {k: tr(v) if isinstance(v, Message) else v for k, v in values.items()}
    text = translations(language()).gettext(message)
    return text.format(**values) if values else text


def ntr(singular: str, plural: str, n: int, **values) -> str:
    """The singular or plural message for count ``n`` (``{n}`` is filled too)."""
    text = translations(language()).ngettext(singular, plural, n)
    return text.format(n=n, **values)


def frozen(fmt: Callable[[Any], str] | None = None) -> Callable[[Any], str]:
    """A widget's ``format_func`` whose labels are fixed when the widget is drawn. Streamlit calls it then, for
    every option, in the session's language; AppTest calls it again later from the test's own thread, where
    ``language()`` would read as English and the labels would no longer match the options."""
    fmt = fmt or tr
    seen: dict = {}

    def label(option) -> str:
        key = option if isinstance(option, Hashable) else repr(option)
        if key not in seen:
            seen[key] = fmt(option)
        return seen[key]

    return label


def sync_language_param() -> str:
    """The session's language from ``?lang=`` (first run) and back into the URL on every run, so a link, a
    reload and a page switch keep it (app.py calls this before ``pg.run()``). Returns it."""
    asked = st.query_params.get(LANG_PARAM)
    if LANG_KEY not in st.session_state:
        st.session_state[LANG_KEY] = asked if asked in LANGUAGES else "en"
    lang = st.session_state[LANG_KEY]
    if lang == "en":
        st.query_params.pop(LANG_PARAM, None)
    elif asked != lang:
        st.query_params[LANG_PARAM] = lang
    return lang


def language_switch() -> None:
    """The sidebar's language switch (its labels are shown in both languages)."""
    st.selectbox("Language · 语言", list(LANGUAGES), format_func=LANGUAGES.get, key=LANG_KEY)
