"""The one rule for text a person types (the CLI's arguments, every text box of the app, the live probe).

* **Normalised**: control and format characters (Unicode category C: NUL, ESC, tab and newline count as
  whitespace anyway; U+200B zero-width space, U+200D zero-width joiner, U+202E right-to-left override, the
  U+FEFF byte-order mark ...) become spaces. They are invisible, come along when text is pasted from a web page
  or a chat app, and carry no word (BERT's reference BasicTokenizer drops them too, ``_clean_text`` in
  google-research/bert's tokenization.py, as does ``BertNormalizer(clean_text=True)`` in tokenizers).
* **Empty** (:func:`is_blank`): nothing but whitespace after that. ``clean_text`` refuses it with an
  ``InputError`` that says what to type.
* **Too long**: beyond ``MAX_TEXT_CHARS`` characters the text is cut before tokenizing (the model sees at
  most ``max_position_embeddings`` tokens anyway) and the caller is told (``cut=True``).

Pages and commands never write their own copy of these checks; they call these functions (or a function of
``bertcore.analysis.inference`` that does) and show the ``InputError`` message.
"""
from __future__ import annotations

import unicodedata

from bertcore.errors import InputError
from bertcore.message import Message

# Longer texts are cut before tokenizing (the model sees at most max_position_embeddings tokens anyway).
MAX_TEXT_CHARS = 100_000


def normalize(text: str) -> str:
    """``text`` with every control and format character (Unicode category C*) replaced by a space."""
    if text.isprintable():
        return text
    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)


def is_blank(text) -> bool:
    """True when ``text`` is None or a string with nothing readable: only whitespace, control and format
    characters (within its first ``MAX_TEXT_CHARS`` characters, the part that is read). The one test of
    "empty" for an optional field such as sentence B."""
    if text is None:
        return True
    if not isinstance(text, str):
        return False  # not text at all: clean_text says so
    return not normalize(text[:MAX_TEXT_CHARS]).strip()


# the names callers give their text, as Messages, so that the app shows the error in its language
_NAMES = {m: m for m in (Message("the text"), Message("the sentence"), Message("sentence A"), Message("sentence B"))}


def clean_text(text, what: str = "the text") -> tuple[str, bool]:
    """``(normalised text, cut)``: control and format characters become spaces, text beyond ``MAX_TEXT_CHARS``
    is cut (``cut=True``). Raises InputError for non-text or empty text, naming ``what``."""
    if not isinstance(text, str):
        raise InputError(Message("{what} must be a string, got {kind}", what=_NAMES.get(what, what),
                                 kind=type(text).__name__))
    cut = len(text) > MAX_TEXT_CHARS
    if cut:
        text = text[:MAX_TEXT_CHARS]
    text = normalize(text)
    if not text.strip():
        raise InputError(Message("{what} is empty; type some text, e.g. 'the cat sat on the mat' (spaces and "
                                 "invisible characters such as zero-width spaces or direction marks do not count)",
                                 what=_NAMES.get(what, what)))
    return text, cut
