"""A live probe of the two pretraining tasks, re-asked at every evaluation while a model trains.

The probe is one sentence with a single ``[MASK]`` (masked LM, BERT §3.1) and one sentence pair (next
sentence prediction, BERT §3.2). At every evaluation (the trainer's ``evaluated`` event) the run's records
(bertcore.analysis.records) call :func:`run_probe` and append the row to ``TrainingRecords.probe_history``, so a
learner watches "the cat [MASK] the cheese" go from "." to "eats" and P(IsNext) for a true pair leave 0.5.
The numbers are exactly what :func:`bertcore.analysis.inference.fill_mask` and
:func:`~bertcore.analysis.inference.nsp_probability` return for the weights of that step.
"""
from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bertcore.analysis.inference import fill_mask, mask_positions, next_tokens, nsp_probability
from bertcore.data.tokenization import basic_tokenize
from bertcore.data.user_text import clean_text, is_blank
from bertcore.errors import InputError
from bertcore.io.checkpoint import atomic_write
from bertcore.message import Message

TOP_K = 3
MAX_PROBE_CHARS = 500
PROBE_COLUMNS = ["step", "text", "top1", "p1", "top2", "p2", "top3", "p3", "pair_a", "pair_b", "p_is_next"]
_MASK_RE = re.compile(r"\[MASK\]", re.IGNORECASE)
# Built-in corpus: mask the verb, as in the "the cat [MASK] the cheese".
_PREFERRED_VERBS = ("eats", "eat", "reads", "read")


@dataclass
class Probe:
    """What to ask the model at every evaluation: ``text`` holds exactly one ``[MASK]``; ``a``/``b`` a pair."""

    text: str
    a: str
    b: str

    def to_dict(self) -> dict:
        return {"text": self.text, "a": self.a, "b": self.b}


def check_probe(probe: Probe, tokenizer=None, max_len: int | None = None) -> list[str]:
    """Raise InputError (saying what to fix) for an unusable probe; return the words the tokenizer does not know.

    With a tokenizer, the tokenizer decides what is a [MASK] (as fill-mask will: a BERT-pytorch vocabulary reads
    <mask>, a word vocabulary does not read "[mask]"); with ``max_len`` (the model's max_position_embeddings) the
    [MASK] must also lie within it. So a probe that passes here never fails later in the training thread
    (``run_probe``).

    Unknown words are allowed (they become ``[UNK]``) but the page shows them, because a probe in words the
    corpus never uses cannot improve.
    """
    for name, value in ((Message("the probe sentence"), probe.text), (Message("sentence A of the pair"), probe.a),
                        (Message("sentence B of the pair"), probe.b)):
        if not isinstance(value, str) or is_blank(value):
            raise InputError(Message("{name} is empty; type some text (spaces and invisible characters such as "
                                     "zero-width spaces do not count)", name=name))
        if len(value) > MAX_PROBE_CHARS:
            raise InputError(Message("{name} has {n} characters; keep it under {limit}", name=name, n=len(value),
                                     limit=MAX_PROBE_CHARS))
    if tokenizer is None:
        n = len(_MASK_RE.findall(probe.text))
    else:
        n = tokenizer.encode(clean_text(probe.text)[0]).count(tokenizer.mask_id)
    if n != 1:
        raise InputError(Message("the probe sentence has {n} [MASK] tokens; put exactly one [MASK] where the model "
                                 "should fill in a word, e.g. 'the cat [MASK] the cheese'", n=n))
    if tokenizer is None:
        return []
    if max_len is not None:
        mask_positions(tokenizer, probe.text, max_len)  # InputError when the [MASK] lies beyond the model's length
    words = []
    for s in (_MASK_RE.sub(" ", probe.text), probe.a, probe.b):
        words += [w for w in tokenizer.unknown_words(s) if w not in words]
    return words


def default_probe(corpus, tokenizer=None) -> Probe:
    """A probe taken from the corpus: a sentence with one content word masked, and a true (A, B) pair.

    On the built-in corpus the masked word is a verb ("eats"); elsewhere it is the least frequent word of the
    first short sentence that the tokenizer keeps as one token. The pair is the corpus's first pair whose B
    differs from A, so P(IsNext) should rise towards 1 as NSP is learned.
    """
    pairs = list(getattr(corpus, "pairs", []) or [])
    if not pairs:
        raise InputError(Message("the corpus has no sentence pairs; load a corpus first"))
    sentences = [s for p in pairs[:300] for s in p]  # the start of the corpus is enough, and fast
    split = getattr(tokenizer, "words", None) or basic_tokenize  # a BERT-pytorch vocabulary splits words its own way
    toks = [split(s) for s in sentences]
    counts = Counter(w for t in toks for w in t)

    def single(w: str) -> bool:
        return tokenizer is None or (w in tokenizer.token_to_id and not tokenizer.unknown_words(w))

    text = None
    for verb in _PREFERRED_VERBS:
        hits = [t for t in toks if verb in t and len(t) <= 10]
        if hits and single(verb):
            words = list(min(hits, key=lambda t: (t[0] != "the", len(" ".join(t)))))
            words[words.index(verb)] = "[MASK]"
            text = " ".join(words)
            break
    if text is None:
        for t in sorted(toks[:200], key=lambda t: abs(len(t) - 8)):
            inner = [(counts[w], i) for i, w in enumerate(t[1:-1], 1) if w.isalpha() and single(w)]
            if inner:
                words = list(t)
                words[min(inner)[1]] = "[MASK]"
                text = " ".join(words)
                break
    if text is None:
        text = "[MASK] " + " ".join(split(pairs[0][0]))
    a, b = next(((a, b) for a, b in pairs if a.strip() != b.strip()), pairs[0])
    return Probe(text, a, b)


def run_probe(model, tokenizer, probe: Probe, step: int, top_k: int = TOP_K) -> dict:
    """One probe row: the top-``top_k`` fill-mask candidates with probabilities and P(IsNext) of the pair. A
    left-to-right model (BERT Table 5's LTR) cannot fill a [MASK]: its candidates are its next tokens after the
    text before the [MASK] (``next_tokens``), its guess for that word from the left context alone."""
    row: dict = {"step": int(step), "text": probe.text}
    if getattr(model, "has_mlm_head", True) and getattr(model.config, "causal", False):
        cands = next_tokens(model, tokenizer, probe.text, top_k=top_k).candidates
    elif getattr(model, "has_mlm_head", True):
        fm = fill_mask(model, tokenizer, probe.text, top_k=top_k)
        cands = fm.masks[0].candidates if fm.masks else []
    else:
        cands = []
    for k in range(top_k):
        tok, p = cands[k] if k < len(cands) else ("", float("nan"))
        row[f"top{k + 1}"], row[f"p{k + 1}"] = tok, float(p)
    row["pair_a"], row["pair_b"] = probe.a, probe.b
    has_nsp = getattr(model, "has_nsp_head", True)
    row["p_is_next"] = float(nsp_probability(model, tokenizer, probe.a, probe.b)) if has_nsp else float("nan")
    return row


def probe_csv_text(rows: list[dict]) -> str:
    """The probe history as CSV text (columns ``PROBE_COLUMNS``)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=PROBE_COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def write_probe_csv(rows: list[dict], path: str | Path) -> Path:
    """Write the probe history atomically."""
    atomic_write(path, probe_csv_text(rows))
    return Path(path)


def read_probe_csv(path: str | Path) -> list[dict]:
    """Rows written by :func:`write_probe_csv`, numbers parsed back; [] when the file is missing or damaged."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    rows = []
    for r in csv.DictReader(io.StringIO(text)):
        try:
            out = dict(r)
            out["step"] = int(r["step"])
            for k in ("p1", "p2", "p3", "p_is_next"):
                out[k] = float(r[k]) if r.get(k) not in (None, "") else float("nan")
        except (KeyError, TypeError, ValueError):
            return []
        rows.append(out)
    return rows
