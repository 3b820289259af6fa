"""The corpus a run trained on, rebuilt from its folder: the run's ``corpus_spec`` in run.json names a built-in
corpus, a file, or the run's own copy (corpus.tsv, with corpus_documents.txt: the document each pair came from,
which NotNext sampling respects, BERT §A.1); a run trained from prepared shards records ``shards:/abs/DATA``.
"""
from __future__ import annotations

from pathlib import Path

from bertcore.data.corpora import get_corpus
from bertcore.data.corpus import load_corpus_file
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.training import runs

CORPUS_FILE = "corpus.tsv"
DOCUMENTS_FILE = "corpus_documents.txt"  # the document id of each corpus.tsv line, when the corpus has them
SHARDS_PREFIX = "shards:"  # corpus_spec of a run trained from prepared shards: "shards:/abs/DATA"


def load_run_corpus(spec: str, run_dir: Path | None = None, name: str | None = None):
    """The corpus a run's ``corpus_spec`` names: a ``get_corpus`` spec, or ``run:corpus.tsv`` (the run's own copy,
    with its document ids when it has them)."""
    if spec == f"run:{CORPUS_FILE}":
        if run_dir is None or not (run_dir / CORPUS_FILE).is_file():
            raise InputError(Message("the run's {file} is missing; this run cannot be resumed", file=CORPUS_FILE))
        corpus = load_corpus_file(run_dir / CORPUS_FILE, name=name, mode="pairs")
        try:
            docs = [int(x) for x in (run_dir / DOCUMENTS_FILE).read_text(encoding="utf-8").split()]
        except (OSError, ValueError):
            docs = None
        if docs is not None and len(docs) == len(corpus.pairs):
            corpus.documents = docs
        return corpus
    return get_corpus(spec)


def run_corpus(run_dir: str | Path):
    """The corpus a run trained on, rebuilt from its run.json (``builtin``, ``tutorial``, a file, or the run's own
    corpus.tsv); None for a run trained from prepared shards. InputError when it cannot be rebuilt."""
    d = Path(run_dir).expanduser()
    meta = runs.read_run_json(d)
    spec = str(meta.get("corpus_spec") or "")
    if not spec:
        raise InputError(Message("{run} does not record its corpus (run.json has no corpus_spec)", run=d.name))
    if spec.startswith(SHARDS_PREFIX):
        return None
    return load_run_corpus(spec, d, meta.get("corpus"))
