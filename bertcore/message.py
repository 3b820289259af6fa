"""Texts bertcore writes for people (a corpus's description, a preset's notes, an error) that a UI may translate.

bertcore itself speaks English: a ``Message`` *is* the English text (a ``str``), so the CLI, a notebook, a log
line or run.json use it as any string. It also keeps its ``template`` and ``values``, so the app can look the
template up in its catalogue and fill the same values into the translation (``explorer.i18n.tr`` does that).
The templates are extracted with the app's texts (scripts/i18n.sh, keyword ``Message``), so a template without a
Chinese entry fails tests/test_i18n.py like any other text of the app.

    Message("{n} pairs from {name} (prose mode)", n=len(pairs), name=name)

A template is a literal string (Babel can only extract literals); ``{name}`` fields are filled with
``str.format``. A value may itself be a ``Message``: it is translated too.
"""
from __future__ import annotations


class Message(str):
    """An English text (``str(m)``) that remembers how it was made: ``m.template`` and ``m.values``."""

    template: str
    values: dict

    def __new__(cls, template: str, **values) -> Message:
        text = template.format(**values) if values else template
        obj = super().__new__(cls, text)
        obj.template = template
        obj.values = values
        return obj

    def __reduce__(self):  # copy.copy / deepcopy keep it a Message (a plain str would lose the template)
        return (_rebuild, (self.template, self.values))


def _rebuild(template: str, values: dict) -> Message:
    return Message(template, **values)


def reason(exc: BaseException) -> str:
    """What ``exc`` says, kept a ``Message`` when it was raised with one, so that an error which quotes another
    (``Message("cannot load the vocabulary: {err}", err=reason(e))``) is translated whole by a UI."""
    return exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], Message) else str(exc)
