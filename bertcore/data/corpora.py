"""The registry of corpora a spec names: ``get_corpus("builtin" | "builtin-zh" | "tutorial" | FILE)``.

Built-in grammars (BERT §3.1/§3.2 data, generated): ``builtin`` English (``bertcore.data.corpus``),
``builtin-zh`` Chinese (``bertcore.data.corpus_zh``); ``NAME:SEED`` picks another seed. Every other spec is
a user's text file. Pages, CLI and runs all go through this one table.
"""
from __future__ import annotations

from typing import Callable

from bertcore.data.corpus import Corpus, builtin_corpus, load_corpus_file, tutorial_corpus
from bertcore.data.corpus_zh import builtin_zh_corpus
from bertcore.errors import CorpusError
from bertcore.message import Message

BUILTIN_CORPORA: dict[str, Callable[..., Corpus]] = {"builtin": builtin_corpus, "builtin-zh": builtin_zh_corpus}
FIXED_CORPORA: dict[str, Callable[[], Corpus]] = {"tutorial": tutorial_corpus}
LANGUAGES = {"builtin": "en", "builtin-zh": "zh", "tutorial": "en"}  # of the built-in specs


def is_builtin_spec(spec: str) -> bool:
    """True for a spec that ``get_corpus`` rebuilds exactly (a built-in name, NAME:SEED, or tutorial)."""
    name, _, seed = str(spec).partition(":")
    return (spec in FIXED_CORPORA or name in BUILTIN_CORPORA) and (not seed or seed.isdigit())


def spec_language(spec: str) -> str | None:
    """The language of a built-in spec ("en", "zh"); None for a file."""
    return LANGUAGES.get(str(spec).partition(":")[0])


def get_corpus(spec: str) -> Corpus:
    """'builtin' | 'builtin-zh' | 'tutorial' | a file path (``builtin:SEED`` / ``builtin-zh:SEED`` pick a seed)."""
    if spec in FIXED_CORPORA:
        return FIXED_CORPORA[spec]()
    name, colon, seed = spec.partition(":")
    if name in BUILTIN_CORPORA:
        if not colon:
            return BUILTIN_CORPORA[name]()
        try:
            return BUILTIN_CORPORA[name](seed=int(seed))
        except ValueError:
            raise CorpusError(Message("corpus {spec}: write {name}:SEED with a whole-number seed", spec=repr(spec),
                                      name=name)) from None
    return load_corpus_file(spec)
