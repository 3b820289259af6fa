"""A large text corpus as token shards on disk, for pre-training beyond the in-memory corpus.

``prepare(corpus, out)`` streams one UTF-8 file or a folder of them (documents separated by blank lines;
a document's lines are joined and split into sentences at ., ! or ?), trains a WordPiece vocabulary with
``tokenizers`` unless one is given, and writes the token ids as numpy arrays that training memory-maps::

    DATA/data.json              format, tokenizer, the source files (size + mtime), the shards, complete flag
    DATA/vocab.txt, tokenizer.json
    DATA/shard_00000.tokens.npy   uint16 (uint32 for a vocabulary over 65,536) ids, sentences back to back
    DATA/shard_00000.sents.npy    int64 [n_sentences + 1]: sentence k is tokens[sents[k]:sents[k + 1]]
    DATA/shard_00000.docs.npy     int64 [n_documents + 1]: document d is sentences docs[d]..docs[d + 1] - 1

Sentence and document boundaries are kept so that next-sentence prediction (BERT §3.2) can take an IsNext
B from the same document and a NotNext B from a *different* one. The corpus is never held in memory: a
shard is cut after the document that fills it. Each shard is written with temp + os.replace and then
recorded in data.json, so an interrupted ``prepare`` continues after its last shard when run again, and a
finished one is a no-op (the source files' sizes and mtimes must match). Only .npy arrays are read back,
with ``allow_pickle=False``.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
from tqdm import tqdm

from bertcore.data.segmentation import split_sentences
from bertcore.data.tokenization import WordPieceTokenizer, load_tokenizer
from bertcore.errors import CorpusError, InputError

FORMAT = "bertcore-shards-1"
META = "data.json"
SHARD_TOKENS = 1 << 24  # ids per shard before it is cut (32 MiB at uint16)
_ENCODE_CHUNK = 2048  # sentences per tokenizers encode_batch call


# ------------------------------------------------------------------ reading the corpus
def corpus_files(spec: str | Path) -> list[Path]:
    """The files of a corpus: the file itself, or every non-hidden file under a folder (sorted)."""
    p = Path(spec).expanduser()
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise CorpusError(f"--corpus {p}: no such file or folder; give a UTF-8 text file or a folder of them")
    files = sorted(f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in
                                                                          f.relative_to(p).parts))
    if not files:
        raise CorpusError(f"--corpus {p} is an empty folder; put UTF-8 text files (documents separated by "
                          "blank lines) in it")
    return files


def _lines(path: Path) -> Iterator[str]:
    """The file's lines, decoded and checked one by one (a binary or non-UTF-8 file stops with its line)."""
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            if no == 1:
                if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
                    raise CorpusError(f"{path} is UTF-16 text; re-save it as UTF-8")
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            if b"\x00" in raw:
                raise CorpusError(f"{path} looks binary (NUL byte on line {no}); give UTF-8 text files only "
                                  "(move other files out of the corpus folder)")
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path} is not valid UTF-8 (bad byte 0x{raw[e.start]:02x} on line {no}); "
                                  "re-save it as UTF-8 or move it out of the corpus folder") from None


def iter_documents(files: list[Path], progress=None) -> Iterator[tuple[int, int, list[str]]]:
    """(file index, document index in that file, sentences) for every non-empty document, streamed."""
    for fi, path in enumerate(files):
        doc_no, buf = 0, []
        for line in _lines(path):
            if progress is not None:
                progress.update(len(line.encode("utf-8")))
            if line.strip():
                buf.append(line.strip())
                continue
            if buf:
                sents = split_sentences("\n".join(buf))
                buf = []
                if sents:
                    yield fi, doc_no, sents
                    doc_no += 1
        if buf and (sents := split_sentences("\n".join(buf))):
            yield fi, doc_no, sents


def _fingerprint(files: list[Path]) -> list[dict]:
    return [{"path": str(f.resolve()), "bytes": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns} for f in files]


# ------------------------------------------------------------------ writing
def _atomic_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _atomic_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)
    os.replace(tmp, path)


def _tokenizer_for(out: Path, files: list[Path], vocab: str | None, vocab_size: int, meta: dict | None, bar):
    if meta is not None:  # resuming: the vocabulary was saved before the first shard
        return load_tokenizer(out, kind="wordpiece")
    if vocab is not None:
        vp = Path(vocab).expanduser()
        if not vp.is_file():
            raise InputError(f"--vocab {vp}: no such file; give a BERT vocab.txt (one token per line) or leave "
                             "--vocab out to train one with --vocab-size")
        return WordPieceTokenizer.from_vocab_file(vp)
    bar.set_description("training WordPiece")

    def texts():  # the trainer reads the corpus twice (see bertcore.data.wordpiece_training)
        bar.reset()
        return (" ".join(s) for _, _, s in iter_documents(files, bar))

    tok = WordPieceTokenizer.train(texts, vocab_size=vocab_size)
    bar.reset()
    return tok


def prepare(corpus: str | Path, out: str | Path, vocab: str | None = None, vocab_size: int = 8000,
            shard_tokens: int = SHARD_TOKENS, quiet: bool = False) -> dict:
    """Tokenize ``corpus`` into shards under ``out`` (see the module docstring); returns data.json's content.

    Resumable and idempotent: a finished ``out`` for the same files is left as it is; a half-written one
    continues after its last complete shard. ``out`` holding shards of other files or settings is refused.
    """
    files = corpus_files(corpus)
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; give a folder for the shards")
    settings = {"vocab": str(Path(vocab).expanduser().resolve()) if vocab else None,
                "vocab_size": None if vocab else int(vocab_size), "shard_tokens": int(shard_tokens)}
    fingerprint = _fingerprint(files)
    meta = None
    if (out / META).is_file():
        meta = read_meta(out)
        if meta["files"] != fingerprint or meta["settings"] != settings:
            raise InputError(f"{out} already holds shards of other files or settings; give another --out, or "
                             "delete that folder to prepare again")
        if meta["complete"]:
            return meta
    out.mkdir(parents=True, exist_ok=True)
    total = sum(f["bytes"] for f in fingerprint)
    bar = tqdm(total=total, unit="B", unit_scale=True, file=sys.stderr, disable=quiet, mininterval=0.5,
               dynamic_ncols=True)
    try:
        tok = _tokenizer_for(out, files, vocab, vocab_size, meta, bar)
        if meta is None:
            tok.save(out)
            meta = {"format": FORMAT, "tokenizer_kind": "wordpiece", "vocab_size": tok.vocab_size,
                    "dtype": "uint16" if tok.vocab_size <= 1 << 16 else "uint32", "files": fingerprint,
                    "settings": settings, "shards": [], "complete": False}
            _atomic_json(out / META, meta)
        _write_shards(out, files, tok, meta, bar)
    finally:
        bar.close()
    n_docs = sum(s["documents"] for s in meta["shards"])
    if n_docs < 2 or not any(s["max_doc_sentences"] >= 2 for s in meta["shards"]):
        raise CorpusError(f"the corpus has {n_docs} document(s) with text; next-sentence prediction needs at least "
                          "2 documents (separated by a blank line) and one with 2 or more sentences")
    return meta


def _write_shards(out: Path, files: list[Path], tok, meta: dict, bar) -> None:
    done = meta["shards"][-1]["end"] if meta["shards"] else None  # (file, doc) of the last shard's last document
    dtype = np.dtype(meta["dtype"])
    tokens: list[np.ndarray] = []
    sent_lens: list[int] = []
    doc_sents: list[int] = []
    n_tok, last = 0, None
    pending: list[tuple[tuple[int, int], list[str]]] = []

    def flush_docs() -> None:  # tokenize the pending documents in one encode_batch call
        nonlocal n_tok, last
        sents = [s for _, ss in pending for s in ss]
        ids = tok.encode_batch(sents)
        k = 0
        for pos, ss in pending:
            kept = 0
            for piece in ids[k:k + len(ss)]:
                if piece:
                    tokens.append(np.asarray(piece, dtype=dtype))
                    sent_lens.append(len(piece))
                    n_tok += len(piece)
                    kept += 1
            k += len(ss)
            if kept:
                doc_sents.append(kept)
            last = pos
        pending.clear()

    def cut() -> None:
        nonlocal n_tok
        if not doc_sents:
            return
        name = f"shard_{len(meta['shards']):05d}"
        _atomic_npy(out / f"{name}.tokens.npy", np.concatenate(tokens))
        _atomic_npy(out / f"{name}.sents.npy", np.concatenate([[0], np.cumsum(sent_lens)]).astype(np.int64))
        _atomic_npy(out / f"{name}.docs.npy", np.concatenate([[0], np.cumsum(doc_sents)]).astype(np.int64))
        meta["shards"].append({"name": name, "tokens": n_tok, "sentences": len(sent_lens),
                               "documents": len(doc_sents), "max_doc_sentences": max(doc_sents), "end": list(last)})
        _atomic_json(out / META, meta)
        tokens.clear(), sent_lens.clear(), doc_sents.clear()
        n_tok = 0

    bar.set_description("tokenizing")
    chunk = min(_ENCODE_CHUNK, max(1, meta["settings"]["shard_tokens"] // 64))  # small shards: check more often
    n_pending = 0
    for fi, di, sents in iter_documents(files, bar):
        if done is not None and (fi, di) <= tuple(done):
            continue  # already in a shard written by an earlier, interrupted run
        pending.append(((fi, di), sents))
        n_pending += len(sents)
        if n_pending >= chunk:
            n_pending = 0
            flush_docs()
            if n_tok >= meta["settings"]["shard_tokens"]:
                cut()
    flush_docs()
    cut()
    if not meta["shards"]:
        raise CorpusError("the corpus holds no text (only blank lines or whitespace); give UTF-8 prose, documents "
                          "separated by blank lines")
    meta["complete"] = True
    _atomic_json(out / META, meta)


# ------------------------------------------------------------------ reading the shards
def read_meta(data: str | Path) -> dict:
    """data.json of a prepared folder; InputError saying to run ``prepare`` when it is missing or damaged."""
    d = Path(data).expanduser()
    try:
        meta = json.loads((d / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{d} holds no prepared shards ({META} is missing); run `python -m bertcore prepare "
                         f"--corpus FILE --out {d}` first") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{d / META} is damaged ({e}); delete {d} and run `python -m bertcore prepare` again") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(f"{d / META} is not a bertcore shard index (format {FORMAT}); run prepare again")
    return meta


@dataclass
class ShardReader:
    """All shards of a prepared folder as one memory-mapped corpus of sentences grouped into documents.

    Global sentence ``s`` of global document ``d``: ``doc_start[d] <= s < doc_start[d + 1]``; ``sentence(s)``
    returns its ids. Only the index arrays (8 bytes per sentence and per document) are read into memory.
    """

    directory: Path
    meta: dict
    tokens: list[np.ndarray]
    sent_offsets: list[np.ndarray]
    shard_first_sent: np.ndarray  # int64 [n_shards + 1]
    doc_start: np.ndarray  # int64 [n_docs + 1], global sentence ids

    @classmethod
    def open(cls, data: str | Path) -> "ShardReader":
        d = Path(data).expanduser()
        meta = read_meta(d)
        if not meta.get("complete"):
            raise InputError(f"{d} is only partly prepared; run the same `python -m bertcore prepare` command again "
                             "to finish it")
        tokens, sents, docs, first = [], [], [], [0]
        for s in meta["shards"]:
            try:
                tokens.append(np.load(d / f"{s['name']}.tokens.npy", mmap_mode="r", allow_pickle=False))
                sents.append(np.load(d / f"{s['name']}.sents.npy", allow_pickle=False))
                docs.append(np.load(d / f"{s['name']}.docs.npy", allow_pickle=False)[:-1] + first[-1])
            except (OSError, ValueError) as e:
                raise InputError(f"shard {s['name']} in {d} is missing or damaged ({e}); delete {d} and run "
                                 "prepare again") from None
            if len(sents[-1]) != s["sentences"] + 1 or int(sents[-1][-1]) != len(tokens[-1]):
                raise InputError(f"shard {s['name']} in {d} does not match {META}; delete {d} and prepare again")
            first.append(first[-1] + s["sentences"])
        doc_start = np.concatenate(docs + [np.asarray([first[-1]], dtype=np.int64)]).astype(np.int64)
        return cls(d, meta, tokens, sents, np.asarray(first, dtype=np.int64), doc_start)

    @property
    def n_sentences(self) -> int:
        return int(self.shard_first_sent[-1])

    @property
    def n_documents(self) -> int:
        return len(self.doc_start) - 1

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    def sentence(self, s: int) -> list[int]:
        k = int(np.searchsorted(self.shard_first_sent, s, side="right")) - 1
        j = s - int(self.shard_first_sent[k])
        off = self.sent_offsets[k]
        return self.tokens[k][int(off[j]):int(off[j + 1])].tolist()

    def doc_of(self, s: int) -> int:
        return int(np.searchsorted(self.doc_start, s, side="right")) - 1

    def tokenizer(self):
        tok = load_tokenizer(self.directory, kind="wordpiece")
        if tok.vocab_size != self.meta["vocab_size"]:
            raise InputError(f"the vocabulary in {self.directory} has {tok.vocab_size} tokens but the shards were "
                             f"written with {self.meta['vocab_size']}; prepare the folder again")
        return tok
