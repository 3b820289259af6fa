"""The session's corpus and tokenizer: one small API, one cache, used by every page.

Data & tokens chooses the corpus (built-in, the tutorial two-liner or an upload) and the tokenizer (word-level,
WordPiece with a vocabulary size, or the BERT-pytorch tutorial's vocabulary, ``bertcore.data.bert_pytorch_vocab``);
Masking & NSP and Train read the same choice. Pages never touch these session keys directly.

* Built-in and tutorial corpora and their tokenizers are shared read-only by all sessions (``st.cache_resource``).
* An uploaded corpus and the tokenizers built from it belong to this session (``st.session_state``). The last
  uploaded file is also kept in the workspace (``<workspace>/uploads/``: the file's bytes as sent, and its name
  and format), so a reload, a new tab with the ``?ws=`` link or a server restart finds it again.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import streamlit as st

from bertcore.data.corpora import get_corpus
from bertcore.data.corpus import load_corpus_file, tutorial_corpus
from bertcore.data.corpus_defaults import default_tokenizer
from bertcore.data.tokenization import TOKENIZER_KINDS
from bertcore.errors import BertcoreError
from bertcore.io.checkpoint import atomic_write
from bertcore.training import locks
from explorer.session import workspace

BUILTIN, TUTORIAL = "builtin", "tutorial"
BUILTIN_ZH = "builtin-zh"  # the built-in Chinese grammar (bertcore.data.corpus_zh), a get_corpus spec
KINDS = TOKENIZER_KINDS  # "word" | "wordpiece" | "bert_pytorch"
_K_CHOICE = "bx_corpus_choice"  # the active CorpusChoice
_K_TOKENIZERS = "bx_upload_tokenizers"  # (corpus key, kind, vocab size) -> tokenizer, uploads only
_UPLOAD_CACHE_SIZE = 8


@dataclass(frozen=True)
class CorpusChoice:
    """A corpus with the key that identifies its content, and the tokenizer chosen for it."""

    corpus: Any
    key: str  # "builtin" | "tutorial" | "upload:<sha1>:<mode>"
    kind: str = "word"  # one of KINDS
    vocab_size: int | None = None  # WordPiece only

    @property
    def uploaded(self) -> bool:
        return self.key.startswith("upload:")


@st.cache_resource(show_spinner=False)
def _tutorial_corpus():
    return tutorial_corpus()


@st.cache_resource(show_spinner="Building the tokenizer…", max_entries=16)
def _shared_tokenizer(key: str, kind: str, vocab_size: int | None):
    """Tokenizers of the built-in and tutorial corpora, shared by all sessions (read-only)."""
    corpus = {BUILTIN: builtin_choice, BUILTIN_ZH: builtin_zh_choice}.get(key, tutorial_choice)().corpus
    return build_tokenizer(corpus, kind, vocab_size)


def build_tokenizer(corpus, kind: str, vocab_size: int | None = None):
    """Word-level vocabulary of the corpus, a WordPiece vocabulary of ``vocab_size`` trained on it, or the
    BERT-pytorch tutorial's (its WordVocab: specials, then whitespace words by frequency); the one builder
    (``default_tokenizer``), with WordPiece's min_frequency=1 as these pages have always built it."""
    return default_tokenizer(corpus, kind, vocab_size, min_frequency=1)


def builtin_choice() -> CorpusChoice:
    return CorpusChoice(workspace.shared_corpus_and_tokenizer()[0], BUILTIN)


@st.cache_resource(show_spinner="Building the built-in Chinese corpus…")
def _builtin_zh_corpus():
    return get_corpus(BUILTIN_ZH)


def builtin_zh_choice() -> CorpusChoice:
    return CorpusChoice(_builtin_zh_corpus(), BUILTIN_ZH)


def tutorial_choice() -> CorpusChoice:
    return CorpusChoice(_tutorial_corpus(), TUTORIAL)


def active() -> CorpusChoice:
    """The corpus and tokenizer choice of this session (the built-in corpus, word-level, by default)."""
    choice = st.session_state.get(_K_CHOICE)
    return choice if isinstance(choice, CorpusChoice) else builtin_choice()


def set_active(choice: CorpusChoice) -> None:
    if choice.kind not in KINDS:
        raise ValueError(f"tokenizer kind must be one of {KINDS}, got {choice.kind!r}")
    st.session_state[_K_CHOICE] = choice


def uploaded() -> CorpusChoice | None:
    """The corpus uploaded last in this workspace (kept while the user looks at other corpora); after a reload or
    a restart, read back from the workspace once per session."""
    choice = st.session_state.get(_K_CHOICE + "_upload")
    if isinstance(choice, CorpusChoice):
        return choice
    if not st.session_state.get(_K_CHOICE + "_restored"):
        st.session_state[_K_CHOICE + "_restored"] = True
        choice = _restore_upload()
        if choice is not None:
            st.session_state[_K_CHOICE + "_upload"] = choice
            return choice
    return None


def remember_upload(choice: CorpusChoice) -> None:
    st.session_state[_K_CHOICE + "_upload"] = choice


UPLOAD_DIR, _UPLOAD_FILE, _UPLOAD_META = "uploads", "corpus.txt", "corpus.json"


def save_upload(data: bytes, name: str, mode: str) -> str | None:
    """Keep the uploaded corpus file in the workspace (atomically; it replaces the previous one). Returns an error
    message for the page when the disk refuses, else None."""


    try:
        ws = workspace.workspace_path(create=True)
        d = ws / UPLOAD_DIR
        d.mkdir(parents=True, exist_ok=True)
        with locks.exclusive(ws):  # the file and its meta as one pair, when two replicas save at once
            atomic_write(d / _UPLOAD_FILE, data)
            atomic_write(d / _UPLOAD_META, json.dumps({"name": str(name), "mode": str(mode)}) + "\n")
    except (OSError, BertcoreError) as e:
        why = getattr(e, "strerror", None) or e
        return (f"the corpus is used in this session but could not be kept in the workspace ({why}); "
                "it will be gone after a reload")
    return None


def _restore_upload() -> CorpusChoice | None:
    """The workspace's kept upload, parsed as it was when uploaded; None when there is none or it cannot be read."""


    try:
        d = workspace.workspace_path() / UPLOAD_DIR
        if not (d / _UPLOAD_META).is_file():
            return None
        meta = json.loads((d / _UPLOAD_META).read_text(encoding="utf-8"))
        data = (d / _UPLOAD_FILE).read_bytes()
        name, mode = str(meta["name"]), str(meta["mode"])
        corpus = load_corpus_file(data, name, mode=mode)
    except (OSError, ValueError, KeyError, TypeError, BertcoreError):
        return None
    return CorpusChoice(corpus, f"upload:{hashlib.sha1(data).hexdigest()[:16]}:{mode}")


def tokenizer(choice: CorpusChoice | None = None):
    """The tokenizer of ``choice`` (default: the active one), built once: shared for the built-in and tutorial
    corpora, per session for uploads."""
    choice = active() if choice is None else choice
    vocab = choice.vocab_size if choice.kind == "wordpiece" else None
    if choice.key == BUILTIN and choice.kind == "word":
        return workspace.shared_corpus_and_tokenizer()[1]
    if not choice.uploaded:
        return _shared_tokenizer(choice.key, choice.kind, vocab)
    cache = st.session_state.setdefault(_K_TOKENIZERS, {})
    k = (choice.key, choice.kind, vocab)
    if k not in cache:
        if len(cache) >= _UPLOAD_CACHE_SIZE:
            cache.clear()
        with st.spinner("Building the tokenizer…"):
            cache[k] = build_tokenizer(choice.corpus, choice.kind, vocab)
    return cache[k]
