"""MLM + NSP batches (BERT §3.1, §3.2) drawn from prepared shards (bertcore.data.shards).

Each example is a function of ``(seed, split, step, index)`` only: its own ``torch.Generator`` is seeded from
those four numbers (splitmix64). The global batch of step ``t`` is examples ``0 .. G-1`` with
``G = batch_size x grad_accum x world_size``; process ``rank`` builds its contiguous slice of them, one
micro-batch of ``batch_size`` per accumulation step. So 1 process x batch 8, 2 processes x batch 4 and
1 process x batch 4 x 2 accumulation steps all see exactly the same 8 examples, with the same masks, and
``--resume`` after step ``t`` needs no data-loader state at all.

An example, as in BERT's create_pretraining_data.py: from a random sentence of a document with at least two
sentences (sentences weighted equally) take consecutive sentences up to the ``max_seq_len - 3`` token budget;
the first 1..n-1 of them are segment A. IsNext (``nsp_positive_prob``): B is the rest. NotNext: B starts at a
random sentence of a *different* document of the same split. The pair is truncated longest-first. Documents
are split into train / held-out by a seeded permutation, so no held-out sentence is trained on.
"""
from __future__ import annotations

import numpy as np
import torch

from bertcore.data.pretraining import MaskingRates, apply_masking, build_ids, pad_batch, token_tables
from bertcore.errors import ConfigError, CorpusError

_M64 = (1 << 64) - 1
_TRAIN, _HELD_OUT = 0, 1
BASELINE_TOKENS = 1 << 24  # the unigram baseline counts at most this many ids


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def example_seed(seed: int, split: int, step: int, index: int) -> int:
    """A 64-bit seed for one example, well mixed from its coordinates."""
    h = 0
    for v in (seed, split, step, index):
        h = _splitmix(h ^ (int(v) & _M64))
    return h


class _Split:
    """The documents of one split: all of them (NotNext B) and those that can start a pair (>= 2 sentences)."""

    def __init__(self, docs: np.ndarray, doc_start: np.ndarray):
        self.docs = np.sort(docs)
        n_sent = doc_start[self.docs + 1] - doc_start[self.docs]
        self.starters = self.docs[n_sent >= 2]
        self.cum = np.cumsum(n_sent[n_sent >= 2] - 1)  # pair starts: every sentence but a document's last

    @property
    def n_starts(self) -> int:
        return int(self.cum[-1]) if len(self.cum) else 0


class ShardData:
    """Pre-training batches from a ``ShardReader`` for one process of a (possibly distributed) run.

    Implements the data-source seam of ``bertcore.training.trainer.Trainer``: ``step_batches(step)``,
    ``fixed_eval_batches(n, seed)``, ``unigram_baseline()``, ``probe_ids()`` and ``tokenizer``.
    """

    def __init__(self, reader, tokenizer, max_seq_len: int = 128, rates: MaskingRates | None = None,
                 nsp_positive_prob: float = 0.5, held_out_frac: float = 0.05, seed: int = 0,
                 batch_size: int = 32, grad_accum: int = 1, rank: int = 0, world_size: int = 1):
        if max_seq_len < 5:
            raise ConfigError(f"max_seq_len={max_seq_len} is too short for [CLS] A [SEP] B [SEP]; use at least 5")
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is outside a world of {world_size} processes")
        if tokenizer.vocab_size != reader.meta["vocab_size"]:
            raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} tokens but the shards were written with "
                              f"{reader.meta['vocab_size']}; use the vocabulary saved in the data folder")
        self.reader, self.tokenizer, self.max_seq_len = reader, tokenizer, int(max_seq_len)
        self.rates = rates or MaskingRates()
        self.nsp_positive_prob, self.seed = float(nsp_positive_prob), int(seed)
        self.batch_size, self.grad_accum = int(batch_size), int(grad_accum)
        self.rank, self.world_size = int(rank), int(world_size)
        n = reader.n_documents
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed)).numpy()
        n_held = min(max(1, round(n * held_out_frac)), n - 2) if held_out_frac > 0 and n >= 3 else 0
        self.splits = {_TRAIN: _Split(perm[n_held:], reader.doc_start),
                       _HELD_OUT: _Split(perm[:n_held], reader.doc_start)}
        if self.splits[_TRAIN].n_starts == 0:
            raise CorpusError("no training document has two sentences, so no IsNext pair can be made; give "
                              "documents of several sentences, or a lower held_out_frac")
        self.eval_on_train = self.splits[_HELD_OUT].n_starts == 0
        if self.eval_on_train:
            self.splits[_HELD_OUT] = self.splits[_TRAIN]
        self._special, self._pool = token_tables(tokenizer)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.grad_accum * self.world_size

    # ------------------------------------------------------------------ one example
    def _take(self, s: int, end: int, budget: int, at_least: int) -> list[list[int]]:
        out, n = [], 0
        while s < end and (n < budget or len(out) < at_least):
            ids = self.reader.sentence(s)
            out.append(ids)
            n += len(ids)
            s += 1
        return out

    def example(self, split: int, step: int, index: int):
        """(ids, segment ids, nsp label, draws [3, max_len], random ids [max_len]) of one example."""
        g = torch.Generator().manual_seed(example_seed(self.seed, split, step, index))
        u = torch.rand(5, generator=g).tolist()
        draws = torch.rand((3, self.max_seq_len), generator=g)
        rand_ids = self._pool[torch.randint(self._pool.numel(), (self.max_seq_len,), generator=g)]
        sp, starts = self.splits[split], self.reader.doc_start
        budget = self.max_seq_len - 3
        k = min(int(u[0] * sp.n_starts), sp.n_starts - 1)
        i = int(np.searchsorted(sp.cum, k, side="right"))
        d = int(sp.starters[i])
        s = int(starts[d]) + k - (int(sp.cum[i - 1]) if i else 0)
        chunk = self._take(s, int(starts[d + 1]), budget, at_least=2)
        a_end = 1 + min(int(u[1] * (len(chunk) - 1)), len(chunk) - 2)
        a = [t for sent in chunk[:a_end] for t in sent]
        is_next = u[2] < self.nsp_positive_prob
        if is_next:
            b = [t for sent in chunk[a_end:] for t in sent]
        else:
            pool = sp.docs if len(sp.docs) >= 2 else np.arange(self.reader.n_documents)
            j = min(int(u[3] * (len(pool) - 1)), len(pool) - 2)
            d2 = int(pool[j])
            if d2 == d:  # draw among the other len(pool) - 1 documents
                d2 = int(pool[-1])
            n2 = int(starts[d2 + 1] - starts[d2])
            s2 = int(starts[d2]) + min(int(u[4] * n2), n2 - 1)
            b = [t for sent in self._take(s2, int(starts[d2 + 1]), budget - len(a), 1) for t in sent]
        ids, types = build_ids(self.tokenizer.cls_id, self.tokenizer.sep_id, a, b, self.max_seq_len)
        return ids, types, 0 if is_next else 1, draws, rand_ids

    def batch(self, split: int, step: int, indices) -> dict:
        """A padded, masked batch of the given examples (same dict as PretrainingData.sample_batch)."""
        exs = [self.example(split, step, i) for i in indices]
        out = pad_batch([e[0] for e in exs], [e[1] for e in exs], self.tokenizer.pad_id)
        ids = out["input_ids"]
        w = ids.shape[1]
        draws = torch.stack([e[3][:, :w] for e in exs], dim=1)  # [3, B, w]
        rand_ids = torch.stack([e[4][:w] for e in exs])
        masked, labels, _ = apply_masking(ids, ~self._special[ids], self.rates, draws[0], draws[1], draws[2],
                                          rand_ids, self.tokenizer.mask_id)
        out["input_ids"], out["mlm_labels"] = masked, labels
        out["nsp_labels"] = torch.tensor([e[2] for e in exs], dtype=torch.long)
        return out

    # ------------------------------------------------------------------ the Trainer's seam
    def step_batches(self, step: int) -> list[dict]:
        """This process's ``grad_accum`` micro-batches of the global batch of optimizer step ``step`` (0-based)."""
        first = self.rank * self.batch_size * self.grad_accum
        return [self.batch(_TRAIN, step, range(first + m * self.batch_size, first + (m + 1) * self.batch_size))
                for m in range(self.grad_accum)]

    def fixed_eval_batches(self, n_examples: int, seed: int, batch_size: int = 64) -> list[dict]:
        """Held-out batches that are the same at every evaluation (fixed examples and masks)."""
        n = int(n_examples)
        return [self.batch(_HELD_OUT, -1 - int(seed), range(s, min(n, s + batch_size))) for s in range(0, n, batch_size)]

    def unigram_baseline(self) -> float:
        """Accuracy of always predicting the most frequent non-special token (over the first ids of the shards)."""
        counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
        left = BASELINE_TOKENS
        for t in self.reader.tokens:
            part = np.asarray(t[:left], dtype=np.int64)
            counts += np.bincount(part, minlength=len(counts))[:len(counts)]
            left -= len(part)
            if left <= 0:
                break
        counts[self._special.numpy()] = 0
        total = int(counts.sum())
        return float(counts.max()) / total if total else 0.0

    def probe_ids(self) -> tuple[list[int], list[int]]:
        """The first two sentences of the first held-out document that has two: the attention probe pair."""
        sp = self.splits[_HELD_OUT]
        s = int(self.reader.doc_start[int(sp.starters[0])])
        return build_ids(self.tokenizer.cls_id, self.tokenizer.sep_id, self.reader.sentence(s),
                      self.reader.sentence(s + 1), self.max_seq_len)
