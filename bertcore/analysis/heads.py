"""Head roles after Clark, Khandelwal, Levy & Manning 2019, "What Does BERT Look At?" (§3 surface-level patterns).

For every layer x head, over a held-out batch of texts, seven measures averaged over the query positions of real
(non-pad) tokens, each query counting once (the batch's queries pooled, so a long text weighs more):

* ``to_prev`` / ``to_next``: the weight a query puts on the token just before / after it (§3.1 "relative
  position"); the first / last token of a text has no previous / next token and is left out of that mean;
* ``to_self``: the weight on its own position;
* ``to_cls`` / ``to_sep``: the weight on [CLS] / on all [SEP]s (§3.2; spelled ``<sos>``/``<eos>`` by a BERT-pytorch
  vocabulary, recognised through ``canonical_special``);
* ``to_punct``: the weight on punctuation tokens ("." and "," in §3.2): every character Unicode punctuation, or
  ASCII non-alphanumeric as in BERT's BasicTokenizer; a WordPiece ``##`` prefix ignored;
* ``entropy``: ``-sum_j a_ij log a_ij`` in nats (§3.3 "broad attention"), 0 log 0 = 0.

A role from these (``role_of``), with the thresholds below as named constants:

* ``SHARE_THRESHOLD`` = 0.5: a head is a previous-token / next-token / self / [CLS] / [SEP] / punctuation head
  when at least half of its attention goes there. Clark et al. report heads that put "over 50%" of their
  attention on the previous or next token (§3.1) and on [SEP] in the middle layers (§3.2); a majority is also the
  smallest share that can name one target alone (two targets cannot both pass unless they overlap, e.g. the
  previous token of the first word is [CLS]; then the larger share wins).
* ``BROAD_FRACTION`` = 0.8: with no majority target, a head is *broad* when its mean entropy is at least 0.8 of
  the entropy of uniform attention over the same queries (``max_entropy``: mean of log(#real keys)). Clark et
  al.'s broad heads spend at most ~10% on any single word (§3.3); a uniform row has normalised entropy 1, and an
  untrained model's heads sit near it. A relative threshold makes the role independent of the text length.
* otherwise *mixed*.

``head_roles_over_steps`` repeats this for every saved step of a run (``bertcore.io.steps``) and finds, per head,
the step at which it took its final role: the first saved step from which its role stays the one it ends with.
Layers and heads are 0-based here and in JSON; the app numbers them from 1.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
import torch

from bertcore.analysis.inference import encode_pair
from bertcore.config import TrainConfig
from bertcore.data.pretraining import MaskingRates, PretrainingData
from bertcore.data.tokenization import canonical_special
from bertcore.data.user_text import is_blank
from bertcore.errors import InputError
from bertcore.io.checkpoint import load_checkpoint
from bertcore.io.steps import list_steps, load_step
from bertcore.message import Message
from bertcore.model.modes import eval_mode

MEASURES = ("to_prev", "to_next", "to_self", "to_cls", "to_sep", "to_punct", "entropy")
SHARE_THRESHOLD = 0.5
BROAD_FRACTION = 0.8
# measure -> role, in the order used to break a tie between two shares that both pass SHARE_THRESHOLD
SHARE_ROLES = {"to_prev": "previous-token", "to_next": "next-token", "to_self": "self", "to_cls": "[CLS]",
               "to_sep": "[SEP]", "to_punct": "punctuation"}
ROLES = (*SHARE_ROLES.values(), "broad", "mixed")
DEFAULT_TEXTS = 64  # held-out pairs of the run's corpus
TEXTS_SEED = 23  # the held-out pairs are drawn with a seed of their own (fixed: every step sees the same texts)
MAX_TEXTS = 2000
_BATCH = 64


def is_punctuation(token: str) -> bool:
    """A token made only of punctuation (Unicode P*, or ASCII non-alphanumeric as BERT's BasicTokenizer)."""
    t = str(token)[2:] if str(token).startswith("##") else str(token)
    if not t or canonical_special(t) != t or t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        return False
    return all(33 <= ord(c) <= 47 or 58 <= ord(c) <= 64 or 91 <= ord(c) <= 96 or 123 <= ord(c) <= 126
               or unicodedata.category(c).startswith("P") for c in t)


def measure_sums(attentions: np.ndarray, tokens: list[str], valid: np.ndarray | None = None) -> dict:
    """Sums (not yet means) of the seven measures over the real queries of ONE text, and their counts.

    ``attentions``: [L, H, T, T] (rows = queries); ``tokens``: T strings; ``valid``: bool [T] (default: the
    tokens that are not [PAD]). Returns ``{measure: [L, H] sum, "n": queries, "n_prev", "n_next", "log_keys"}``.
    """
    A = np.asarray(attentions, dtype=np.float64)
    if A.ndim != 4 or A.shape[-1] != A.shape[-2] or A.shape[-1] != len(tokens):
        raise ValueError(f"attentions must be [L, H, T, T] with T = {len(tokens)} tokens, got {A.shape}")
    T = A.shape[-1]
    canon = [canonical_special(str(t)) for t in tokens]
    m = np.array([c != "[PAD]" for c in canon]) if valid is None else np.asarray(valid, dtype=bool)
    q = np.flatnonzero(m)  # real queries
    Q = A[:, :, q, :]  # [L, H, R, T]

    def on(pred) -> np.ndarray:  # [L, H]: weight on the real keys where pred holds, summed over the queries
        return Q[..., [j for j in range(T) if m[j] and pred(j)]].sum(-1).sum(-1)

    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -(Q * np.log(np.where(Q > 0, Q, 1.0))).sum(-1).sum(-1)
    prev = [i for i in q if i >= 1 and m[i - 1]]
    nxt = [i for i in q if i + 1 < T and m[i + 1]]
    diag = np.diagonal(A, axis1=2, axis2=3)  # [L, H, T]
    return {"to_prev": A[:, :, prev, np.array(prev) - 1].sum(-1) if prev else np.zeros(A.shape[:2]),
            "to_next": A[:, :, nxt, np.array(nxt) + 1].sum(-1) if nxt else np.zeros(A.shape[:2]),
            "to_self": diag[:, :, q].sum(-1), "to_cls": on(lambda j: canon[j] == "[CLS]"),
            "to_sep": on(lambda j: canon[j] == "[SEP]"), "to_punct": on(lambda j: is_punctuation(tokens[j])),
            "entropy": ent, "n": len(q), "n_prev": len(prev), "n_next": len(nxt),
            "log_keys": len(q) * float(np.log(max(int(m.sum()), 1)))}


def pooled_measures(parts: list[dict]) -> dict:
    """Means over every real query of the texts whose ``measure_sums`` are ``parts``: ``{measure: [L, H]}`` plus
    ``max_entropy`` (the mean log(#keys): the entropy of uniform attention over the same queries)."""
    if not parts:
        raise InputError(Message("no texts to measure the heads on; give at least one sentence"))
    tot = {k: sum(p[k] for p in parts) for k in (*MEASURES, "n", "n_prev", "n_next", "log_keys")}
    denom = {"to_prev": tot["n_prev"], "to_next": tot["n_next"]}
    nan = np.full(np.shape(tot["entropy"]), np.nan)
    out = {k: (tot[k] / denom.get(k, tot["n"]) if denom.get(k, tot["n"]) else nan.copy()) for k in MEASURES}
    out["max_entropy"] = tot["log_keys"] / tot["n"] if tot["n"] else float("nan")
    return out


def role_of(values: dict, max_entropy: float) -> str:
    """One head's role from its seven measures (module docstring: thresholds and their reasons)."""
    passing = [(float(values[k]), -i, r) for i, (k, r) in enumerate(SHARE_ROLES.items())
               if np.isfinite(values[k]) and values[k] >= SHARE_THRESHOLD]
    if passing:
        return max(passing)[2]
    if max_entropy > 0 and np.isfinite(values["entropy"]) and values["entropy"] >= BROAD_FRACTION * max_entropy:
        return "broad"
    return "mixed"


def roles_from(measures: dict) -> list[list[str]]:
    """[L][H] roles from ``pooled_measures``' arrays."""
    L, H = np.shape(measures["entropy"])
    return [[role_of({k: measures[k][layer, h] for k in MEASURES}, measures["max_entropy"]) for h in range(H)]
            for layer in range(L)]


def encode_texts(tokenizer, texts, max_len: int) -> list[tuple[list[int], list[int]]]:
    """(ids, token types) of each text: a string, or an (A, B) pair (``[CLS] A [SEP] B [SEP]``)."""
    out = []
    for t in texts:
        a, b = (t, None) if isinstance(t, str) else (t[0], t[1] if len(t) > 1 else None)
        ids, types, _ = encode_pair(tokenizer, a, b, max_len)
        out.append((ids, types))
    return out


@torch.no_grad()
def text_attentions(model, tokenizer, texts, max_len: int | None = None):
    """Yield (tokens, attentions [L, H, T, T] float64) for each text, batched by length so nothing is padded."""
    limit = int(max_len) if max_len is not None else int(model.config.max_position_embeddings)
    enc = encode_texts(tokenizer, texts, limit)
    by_len: dict[int, list[int]] = {}
    for i, (ids, _) in enumerate(enc):
        by_len.setdefault(len(ids), []).append(i)
    with eval_mode(model):
        for _, idx in sorted(by_len.items()):
            for s in range(0, len(idx), _BATCH):
                chunk = idx[s:s + _BATCH]
                x = torch.tensor([enc[i][0] for i in chunk])
                out = model(x, token_type_ids=torch.tensor([enc[i][1] for i in chunk]),
                            attention_mask=torch.ones_like(x), output_attentions=True)
                att = torch.stack(list(out.attentions), 1).double().numpy()  # [B, L, H, T, T]
                for row, i in enumerate(chunk):
                    yield list(tokenizer.convert_ids_to_tokens(enc[i][0])), att[row]


def head_measures(model, tokenizer, texts, max_len: int | None = None) -> dict:
    """``{measure: [L, H], max_entropy, roles: [L][H]}`` of ``model`` on ``texts`` (strings or (A, B) pairs)."""
    texts = list(texts)
    if not texts:
        raise InputError(Message("no texts to measure the heads on; give at least one sentence"))
    out = pooled_measures([measure_sums(att, toks) for toks, att in text_attentions(model, tokenizer, texts, max_len)])
    out["roles"] = roles_from(out)
    return out


def head_rows(result: dict) -> list[dict]:
    """One JSON row per head: 0-based ``layer, head``, the seven measures and the ``role``."""
    L, H = np.shape(result["entropy"])
    return [{"layer": layer, "head": h, **{k: float(result[k][layer, h]) for k in MEASURES},
             "role": result["roles"][layer][h]} for layer in range(L) for h in range(H)]


def parse_texts(content: str, what: str = Message("the texts file")) -> list:
    """One sentence, or a TAB-separated pair A<TAB>B, per line (blank lines skipped): strings and (A, B) tuples.

    InputError names the line to fix: more than one TAB, an empty half, or more than ``MAX_TEXTS`` lines."""
    out: list = []
    for no, line in enumerate(str(content).splitlines(), 1):
        if is_blank(line):
            continue
        parts = line.rstrip("\r\n").split("\t")
        if len(parts) > 2:
            raise InputError(Message("{what}, line {no}: {n} TABs; write one sentence, or sentence A<TAB>B", what=what,
                                     no=no, n=len(parts) - 1))
        if any(is_blank(p) for p in parts):
            raise InputError(Message("{what}, line {no}: one side of the TAB is empty; write sentence A<TAB>sentence B",
                                     what=what, no=no))
        out.append(parts[0] if len(parts) == 1 else (parts[0], parts[1]))
        if len(out) > MAX_TEXTS:
            raise InputError(Message("{what} has more than {limit} texts; the measures need far fewer, keep the first "
                                     "{keep}", what=what, limit=MAX_TEXTS, keep=MAX_TEXTS))
    if not out:
        raise InputError(Message("{what} has no text; write one sentence or one A<TAB>B pair per line", what=what))
    return out


def held_out_texts(corpus, tokenizer, train_config: dict | None = None, n: int = DEFAULT_TEXTS,
                   seed: int = TEXTS_SEED) -> list[tuple[str, str]]:
    """``n`` (A, B) pairs of ``corpus``'s held-out split (the run's own split: its seed and held_out_frac), drawn
    with ``seed``; pairs that really follow each other (IsNext), as Clark et al. read running text."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_TEXTS:
        raise InputError(Message("n={n} texts must be a whole number in [1, {limit}]", n=repr(n), limit=MAX_TEXTS))
    tc = TrainConfig.from_dict(dict(train_config)) if train_config else TrainConfig()
    data = PretrainingData(corpus, tokenizer, tc.max_seq_len, MaskingRates.from_train_config(tc),
                           tc.nsp_positive_prob, tc.held_out_frac, tc.seed)
    pool = data.splits["held_out"]
    g = torch.Generator().manual_seed(int(seed))
    pick = pool[torch.randperm(len(pool), generator=g)[:n]].tolist()
    return [tuple(corpus.pairs[i]) for i in pick]


def final_role_steps(steps: list[int], roles: list[list[list[str]]]) -> list[list[int]]:
    """[L][H]: the first step from which each head's role stays the role it has at the last step."""
    L, H = len(roles[-1]), len(roles[-1][0])
    out = [[steps[-1]] * H for _ in range(L)]
    for layer in range(L):
        for h in range(H):
            k = len(steps) - 1
            while k > 0 and roles[k - 1][layer][h] == roles[-1][layer][h]:
                k -= 1
            out[layer][h] = steps[k]
    return out


def head_roles_over_steps(run_dir: str | Path, texts, max_len: int | None = None, steps: list[int] | None = None,
                          progress=None) -> dict:
    """Measures and roles at every saved step of ``run_dir`` (``steps``: a subset), and each head's final-role step.

    Returns ``{steps, per_step: [head_measures result], final_role_step: [L][H]}``. A run without saved steps
    (trained before replay existed) gives its final checkpoint alone, as step ``steps_done`` (its last history
    row) or 0. ``progress(i, n)`` is called after each step."""
    base = load_checkpoint(run_dir)
    have = list_steps(run_dir)
    texts = list(texts)
    chosen = have if steps is None else [int(s) for s in steps]
    missing = [s for s in chosen if s not in have]
    if missing:
        saved = ", ".join(map(str, have))
        if saved:
            raise InputError(Message("step {step} is not saved in {run}; it has {saved}", step=missing[0],
                                     run=Path(run_dir).name, saved=saved))
        raise InputError(Message("step {step} is not saved in {run}; it has no saved steps (leave --step out)",
                                 step=missing[0], run=Path(run_dir).name))
    per = []
    if not chosen:
        last = int(base.history["step"].iloc[-1]) if base.history is not None and len(base.history) else 0
        chosen, per = [last], [head_measures(base.model, base.tokenizer, texts, max_len)]
    else:
        for i, s in enumerate(chosen):
            model = base.model if s == have[-1] else load_step(run_dir, s, bundle=base).model
            per.append(head_measures(model, base.tokenizer, texts, max_len))
            if progress is not None:
                progress(i + 1, len(chosen))
    return {"steps": chosen, "per_step": per, "final_role_step": final_role_steps(chosen, [p["roles"] for p in per])}
