"""The activations an SAE learns from, and the MLM loss with its reconstruction spliced in.

The sites are the glass box's named tensors (``bertcore.model.tap``): ``residual`` at layer L is
``layer.L.output`` (the residual stream after layer L, (T, D)), ``ffn`` is ``layer.L.ffn.intermediate`` (the FFN's
activation, (T, F)). The inputs are the run's own corpus: true pairs ``[CLS] A [SEP] B [SEP]`` masked as in
pre-training (BERT §3.1: 15% of the tokens, 80% [MASK] / 10% random / 10% kept, seeded), so the SAE sees the
activations the model was trained on, [MASK] included. A seeded draw of the pairs gives the SAE's training tokens
and, disjoint from them, the evaluation tokens its quality and feature labels are measured on.

:func:`spliced_losses` runs the evaluation sequences three times through ``Tap(edit={site: fn})``: clean, with the
site replaced by the SAE's reconstruction, and with it zeroed; loss recovered = (zero − spliced) / (zero − clean).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bertcore.data.pretraining import MaskingRates, apply_masking, build_pair, token_tables
from bertcore.data.token_labels import encode_words, grammar_pairs, pair_word_facts
from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.modes import eval_mode
from bertcore.model.tap import Tap

SITES = ("residual", "ffn")
BATCH = 256


def hook_name(layer: int, site: str) -> str:
    """The tap name of ``site`` at ``layer`` (0-based)."""
    if site not in SITES:
        raise InputError(Message("site {site} is unknown; use 'residual' (the output of a layer) or 'ffn' (the FFN "
                                 "activation)", site=repr(site)))
    return f"layer.{int(layer)}.output" if site == "residual" else f"layer.{int(layer)}.ffn.intermediate"


def site_width(config, site: str) -> int:
    return int(config.hidden_size if site == "residual" else config.intermediate_size)


@dataclass
class TokenSet:
    """Masked sequences of corpus pairs and, per token, what is true of it (``bertcore.data.token_labels``)."""
    sequences: list  # input ids after masking
    types: list
    labels: list  # MLM labels: the original id at selected positions, -100 elsewhere
    pairs: list  # the corpus pair index of each sequence
    facts: list  # per sequence, per token: a set of labels ("class:noun", ...)
    grammar: bool  # True: the grammar's labels; False: words and positions stand in

    def n_tokens(self) -> int:
        return sum(len(s) for s in self.sequences)


@dataclass
class Activations:
    """One site's activations at every token of a TokenSet, in sequence order: ``x[i]`` is token ``pos[i]`` of
    sequence ``seq[i]``."""
    hook: str
    x: torch.Tensor  # (N, width) float32
    seq: torch.Tensor  # (N,)
    pos: torch.Tensor  # (N,)
    tokens: TokenSet = field(repr=False, default=None)


def draw_pairs(n_corpus: int, n_train: int, n_eval: int, seed: int) -> tuple[list[int], list[int]]:
    """Disjoint, seeded draws of pair indices for the SAE's training and evaluation tokens, from the corpus's
    first ``2 (n_train + n_eval)`` pairs (a generated corpus's pairs are independent draws, so its first pairs are
    as good a sample as any, and the grammar need not redraw all of them)."""
    pool = min(n_corpus, 2 * (n_train + n_eval))
    perm = torch.randperm(pool, generator=torch.Generator().manual_seed(int(seed) + 7919)).tolist()
    n_eval = min(n_eval, max(1, pool // 3))
    n_train = min(n_train, pool - n_eval)
    return sorted(perm[n_eval:n_eval + n_train]), sorted(perm[:n_eval])


def token_set(corpus, tokenizer, indices: list[int], max_len: int, seed: int,
              rates: MaskingRates | None = None) -> TokenSet:
    """The pairs ``indices`` of ``corpus`` as masked sequences with the labels of every token."""
    labelled = grammar_pairs(corpus, max(indices, default=-1) + 1)
    out = TokenSet([], [], [], [], [], labelled is not None)
    rows = []
    for i in indices:
        a, b = corpus.pairs[i]
        a_ids, b_ids = tokenizer.encode(a), tokenizer.encode(b)
        facts_a = facts_b = None
        if labelled is not None:
            wa, fa, wb, fb = pair_word_facts(labelled[i])
            ea, eb = encode_words(tokenizer, wa, fa), encode_words(tokenizer, wb, fb)
            if ea[0] == a_ids and eb[0] == b_ids:
                facts_a, facts_b = ea[1], eb[1]
        rows.append((i, a_ids, b_ids, facts_a, facts_b))
    if labelled is not None and any(r[3] is None for r in rows):
        out.grammar = False  # the vocabulary splits the grammar's words differently: words and positions stand in
    built = [build_pair(tokenizer, r[1], r[2], max_len) for r in rows]
    masked_rows = _mask_rows([ids for ids, _ in built], tokenizer, rates, seed)
    special = {tokenizer.cls_id: "special:[CLS]", tokenizer.sep_id: "special:[SEP]",
               tokenizer.mask_id: "special:[MASK]"}
    for (i, _, _, facts_a, facts_b), (ids, types), (masked, labels) in zip(rows, built, masked_rows):
        words = tokenizer.convert_ids_to_tokens(masked)
        n_a = types.count(0) - 2  # A's tokens kept after truncation
        n_b = len(ids) - n_a - 3
        word_facts = ([set()] + list(facts_a[:n_a]) + [set()] + list(facts_b[:n_b]) + [set()]) if out.grammar else None
        facts = []
        for p, (tid, t) in enumerate(zip(masked, types)):
            f = {f"sentence:{'AB'[t]}", f"position:{p}"}
            if tid in special:
                f.add(special[tid])
            if out.grammar:
                f |= word_facts[p]
                f.add(f"topic:{labelled[i].topic}")
            elif tid not in special:
                f.add(f"word:{words[p]}")
            facts.append(frozenset(f))
        out.sequences.append(masked)
        out.types.append(types)
        out.labels.append(labels)
        out.pairs.append(i)
        out.facts.append(facts)
    return out


def _mask_rows(rows: list, tokenizer, rates: MaskingRates | None, seed: int) -> list:
    """Pre-training's masking (``bertcore.data.pretraining``) of each row, drawn from one seeded generator:
    [(masked ids, MLM labels)]."""
    g = torch.Generator().manual_seed(int(seed))
    rates = rates or MaskingRates()
    special, pool = token_tables(tokenizer)
    out = []
    for batch in _by_length(rows):
        ids = torch.tensor([rows[i] for i in batch], dtype=torch.long)
        shape = ids.shape  # the draws of pre-training's batch masking, in its order
        u_sel, u_pick, u_act = (torch.rand(shape, generator=g) for _ in range(3))
        rand_ids = pool[torch.randint(pool.numel(), shape, generator=g)]
        masked, labels, _ = apply_masking(ids, ~special[ids], rates, u_sel, u_pick, u_act, rand_ids,
                                          tokenizer.mask_id)
        out += list(zip(batch, masked.tolist(), labels.tolist()))
    out.sort(key=lambda r: r[0])
    return [(m, lb) for _, m, lb in out]


def _by_length(sequences: list) -> list[list[int]]:
    """Batches of sequence indices of one length each (no padding, so no number depends on a padding mask)."""
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(sequences):
        by_len.setdefault(len(s), []).append(i)
    return [idx[k:k + BATCH] for _, idx in sorted(by_len.items()) for k in range(0, len(idx), BATCH)]


def collect(model, ts: TokenSet, hook: str) -> Activations:
    """The activation ``hook`` at every token of ``ts`` (one forward pass per batch, eval mode)."""
    parts: list = [None] * len(ts.sequences)
    with eval_mode(model):
        for batch in _by_length(ts.sequences):
            x = torch.tensor([ts.sequences[i] for i in batch], dtype=torch.long)
            t = torch.tensor([ts.types[i] for i in batch], dtype=torch.long)
            tap = Tap([hook])
            model(x, token_type_ids=t, attention_mask=torch.ones_like(x), tap=tap)
            acts = tap.cache[hook].float()
            for j, i in enumerate(batch):
                parts[i] = acts[j]
    seq = torch.cat([torch.full((len(s),), i, dtype=torch.long) for i, s in enumerate(ts.sequences)])
    pos = torch.cat([torch.arange(len(s)) for s in ts.sequences])
    return Activations(hook, torch.cat(parts).contiguous(), seq, pos, ts)


def spliced_losses(model, ts: TokenSet, hook: str, sae) -> dict:
    """The MLM loss (mean cross-entropy over the masked positions of ``ts``) clean, with ``hook`` replaced by
    ``sae``'s reconstruction (``sae(x)``), and with ``hook`` zeroed; and the loss recovered."""
    sums = {"clean": 0.0, "spliced": 0.0, "zero": 0.0}
    n = 0
    edits = {"clean": None, "spliced": lambda h: sae(h.float()).to(h.dtype), "zero": torch.zeros_like}
    with eval_mode(model):
        for batch in _by_length(ts.sequences):
            x = torch.tensor([ts.sequences[i] for i in batch], dtype=torch.long)
            t = torch.tensor([ts.types[i] for i in batch], dtype=torch.long)
            y = torch.tensor([ts.labels[i] for i in batch], dtype=torch.long)
            count = int((y != -100).sum())
            if not count:
                continue
            for name, fn in edits.items():
                tap = Tap(edit={hook: fn}) if fn is not None else Tap()
                out = model(x, token_type_ids=t, attention_mask=torch.ones_like(x), mlm_labels=y, tap=tap)
                sums[name] += float(out.mlm_loss) * count
            n += count
    if not n:
        raise InputError(Message("no token was masked in the evaluation pairs, so no MLM loss can be measured; use "
                                 "a corpus with longer sentences"))
    res = {f"{k}_loss": v / n for k, v in sums.items()}
    gap = res["zero_loss"] - res["clean_loss"]
    res["loss_recovered"] = (res["zero_loss"] - res["spliced_loss"]) / gap if abs(gap) > 1e-9 else float("nan")
    res["masked_tokens"] = n
    return res
