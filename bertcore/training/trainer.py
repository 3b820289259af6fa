"""Pretraining loop for BERT's two tasks (Devlin et al. 2019, §3.1 masked LM and §3.2 next sentence prediction).

minGPT-style: a plain object with ``step()`` / ``run(n)`` / ``stop()`` and no UI code, so the same trainer drives
a notebook, the CLI (``python -m bertcore train``) and the app's background thread; they listen through its
``callbacks`` (``bertcore.training.callbacks``: step, eval, ...).

* AdamW with decoupled weight decay (not on biases / LayerNorm), linear warmup then linear decay to 0
  (BERT §A.2), global gradient-norm clipping.
* Reproducible: the seed fixes the weight init, the data order and masking (a private ``torch.Generator``)
  and the dropout masks (a second private generator handed to ``model.set_dropout_generator``). Nothing
  touches the global torch RNG, so two trainers in two threads each match a solo run with the same seed.
* NaN / inf: a non-finite loss or gradient is never applied. Training stops with ``error`` set and the
  weights stay the last good ones (``bertcore.training.guard``).
* On a GPU a step does not wait for the GPU: its numbers stay there and are read every few steps
  (``bertcore.training.guard``; ``step()`` returns a ``PendingRow`` until then), and the batches of the next steps
  are made ahead on a background thread (``bertcore.training.prefetch``). The curve is the same either way.
* ``history`` (``bertcore.training.history.History``): one row per step, held-out metrics every ``eval_every``
  steps and at the end.
* The trainer only trains. What else a run records (the live probe, the skills, attention snapshots) listens
  through ``callbacks``: ``bertcore.analysis.records.TrainingRecords.attach(trainer)``. The trainer fires
  ``evaluated`` inside ``evaluate()`` and ``done`` when it stops changing the weights (the last step, a stop's
  ``finalize``, a failure), and reads the GPU's pending rows at every ``snapshot_every`` step, where a listener
  reads the weights.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import threading
import time

import pandas as pd
import torch

from bertcore.config import BertConfig, TrainConfig, check_compatible
from bertcore.data.pretraining import MaskingRates, PretrainingData
from bertcore.data.tokenization import WordTokenizer
from bertcore.errors import ConfigError
from bertcore.model.bert import init_model
from bertcore.model.fast_path import FastPath, seed_device_dropout
from bertcore.training import determinism, distributed
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime, to_device
from bertcore.training.guard import GOOD_COPY_EVERY, StepGuard
from bertcore.training.history import History, PendingRow
from bertcore.training.loop import Stoppable, run_steps
from bertcore.training.prefetch import BatchSource, StepBatches, on_device
from bertcore.model.modes import eval_mode
from bertcore.training.optim import adamw, dropout_seed, scheduler

PREFETCH_DEPTH = 2  # steps made ahead on a GPU (bertcore.training.prefetch)


def _has_loss_only(model) -> bool:
    return "return_mlm_logits" in inspect.signature(model.forward).parameters


class Trainer(Stoppable):
    """Pretrains ``BertForPreTraining`` on MLM (§3.1) + NSP (§3.2) over a corpus of sentence pairs.

    ``tokenizer=None`` builds a word-level vocabulary from the corpus and sets ``vocab_size`` from it.
    ``model=None`` builds a fresh model seeded from ``train_config.seed``; a given ``model`` is trained in place
    (pass a copy to keep the original, e.g. a shared untrained model).

    ``data`` replaces the in-memory corpus with another source of batches, e.g. ``ShardData`` over prepared
    shards: it has ``tokenizer``, ``step_batches(step) -> [micro-batch, ...]``, ``fixed_eval_batches``,
    ``unigram_baseline`` and ``probe_ids``. ``runtime`` (bertcore.training.device.Runtime) sets the device,
    bf16 autocast, gradient accumulation, torch.compile and the process group of a distributed run.
    ``callbacks``: who listens (``bertcore.training.callbacks.Callbacks``; the trainer keeps its own copy).
    ``prefetch``: steps whose batches ``run`` makes ahead on a background thread (default: PREFETCH_DEPTH on CUDA,
    0 on the CPU); ``defer_rows``: keep each step's numbers on the device and read them every GOOD_COPY_EVERY
    steps (default: on CUDA). Neither changes the curve. ``checked``: the caller checked the two configs together
    (``RunSpec.check``, the training route), so they are not checked again.
    """

    def __init__(self, model_config: BertConfig, train_config: TrainConfig, corpus=None, tokenizer=None, model=None,
                 data=None, runtime=None, callbacks: Callbacks | None = None, prefetch: int | None = None,
                 defer_rows: bool | None = None, checked: bool = False):
        if data is not None:
            tokenizer = data.tokenizer
        elif tokenizer is None:
            tokenizer = WordTokenizer.build(corpus.texts())
        if model is not None:
            model_config = model.config
        elif model_config.vocab_size != tokenizer.vocab_size:
            model_config = model_config.replace(vocab_size=tokenizer.vocab_size)
        if model_config.vocab_size != tokenizer.vocab_size:
            raise ConfigError(
                f"the model has vocab_size={model_config.vocab_size} but the tokenizer has {tokenizer.vocab_size} "
                "tokens; train with the tokenizer the model was built for"
            )
        if not checked:  # a caller that built the configs by hand; the training route checked them already
            check_compatible(model_config, train_config)
        self.model_config, self.config, self.tokenizer, self.corpus = model_config, train_config, tokenizer, corpus
        tc = train_config
        rates = MaskingRates.from_train_config(tc)
        if data is None:
            data = PretrainingData(corpus, tokenizer, tc.max_seq_len, rates, tc.nsp_positive_prob,
                                   tc.held_out_frac, tc.seed, fixed_length=tc.pad_to or None,
                                   sentence_task=tc.sentence_task, causal=model_config.causal)
        self.data = data
        self.runtime = rt = runtime if runtime is not None else Runtime()
        self.device = rt.torch_device
        if getattr(rt, "deterministic", False):
            determinism.apply(self.device)  # CUDA: deterministic kernels from here on; nothing to do on a CPU
        self.model = model if model is not None else init_model(model_config, tc.seed)
        self.model.to(self.device).train()
        self._gen = torch.Generator().manual_seed(tc.seed)  # data order + masking
        # dropout masks; each process of a distributed run draws its own (rank 0 matches a one-process run)
        self._dropout_gen = torch.Generator(self.device).manual_seed(dropout_seed(tc.seed, rt.rank))
        self.deterministic_dropout = hasattr(self.model, "set_dropout_generator")
        if self.deterministic_dropout:
            self.model.set_dropout_generator(self._dropout_gen)
        # CUDA: the fast path (bertcore.model.fast_path; fused dropout reseeded each step), none on a CPU
        self.fast = FastPath()
        if hasattr(self.model, "set_fast_path"):
            self.fast = FastPath.for_device(self.device, rt.compile)
            self.model.set_fast_path(self.fast)

        self.optimizer, self._params = adamw(self.model, tc.lr, tc.weight_decay)
        # the step needs the MLM loss, not the (N, V) logits: the head's decoder runs fused with the loss
        # (bertcore.model.mlm_loss; same loss and gradients); models without that switch get the plain call
        self._loss_only = {"return_mlm_logits": False} if _has_loss_only(self.model) else {}
        self._forward = distributed.wrap(self.model, rt)  # DDP when several processes, else the model itself
        if rt.compile and not self.fast.compile_layers:  # compiled layers replace the whole-model compile
            self._forward = torch.compile(self._forward)
        self.scheduler = scheduler(self.optimizer, tc.warmup_steps, tc.steps)

        self.step_count = 0
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()
        self.history = History.pretraining()
        self.callbacks = callbacks.copy() if callbacks is not None else Callbacks()
        self._eval_batches = None
        # the sentence head trains unless sentence_task=none (RoBERTa's MLM alone: no NSP loss, NaN in the history);
        # the checkpoint says which task it learned (bertcore.io.checkpoint: heads), so inference reads it right
        self.sentence_head = tc.sentence_task != "none"
        if hasattr(self.model, "has_nsp_head"):
            self.model.has_nsp_head = self.sentence_head
            self.model.sentence_task = tc.sentence_task
        # An untrained model predicts ~uniformly: loss ~ ln(V) + ln(2). Far above that, training has diverged.
        self._init_loss = math.log(model_config.vocab_size) + (math.log(2) if self.sentence_head else 0.0)
        on_gpu = self.device.type == "cuda"
        self._guard = StepGuard(self._params, self.optimizer, self._init_loss, self.device,
                                deferred=on_gpu if defer_rows is None else defer_rows,
                                sentence_head=self.sentence_head)
        self.divergence_threshold = self._guard.threshold
        self.batches = BatchSource(self.data, self._gen, tc.batch_size, rt.grad_accum, self.device,
                                   (PREFETCH_DEPTH if on_gpu else 0) if prefetch is None else prefetch,
                                   lambda: self._next_batches())
        self.unigram_baseline = float(self.data.unigram_baseline())
        self.train_seconds = 0.0  # time spent in step(), summed (a resumed run goes on from its skills.csv)

    # ------------------------------------------------------------------ public API
    def step(self) -> dict:
        """One optimizer step on a fresh batch; returns the history row (also appended to ``history``). With
        ``defer_rows`` a step between two reads returns a ``PendingRow`` (its numbers reach ``history`` later)."""
        if self.done:
            return self.history.last()
        tc, model, guard = self.config, self.model, self._guard
        t0 = time.perf_counter()
        if not model.training:
            model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.fast.fused_dropout:  # this step's dropout masks: a function of (seed, rank, step)
            seed_device_dropout(self.device, tc.seed, self.runtime.rank, self.step_count)
        acc, counts = self._accumulate_gradients(self.batches.next(self.step_count))
        if tc.grad_clip > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(self._params, tc.grad_clip, foreach=True)
        else:
            gnorm = torch.nn.utils.get_total_norm([p.grad for p in self._params if p.grad is not None], foreach=True)
        step = self.step_count + 1
        guard.record(step, acc, gnorm, counts, self.optimizer.param_groups[0]["lr"], t0)
        final = step >= tc.steps
        evaluate = ((tc.eval_every and step % tc.eval_every == 0) or final) and self.runtime.is_main
        # an attention snapshot's step (bertcore.analysis.records): its listener reads the weights, so read here too
        snapshot = bool(tc.snapshot_every) and step % tc.snapshot_every == 0 and self.runtime.is_main
        if guard.deferred and not (final or evaluate or snapshot or self.step_count % GOOD_COPY_EVERY == 0):
            self.optimizer.step()  # skipped on the device if this or an earlier pending step was bad
            self.scheduler.step()
            self.step_count = step
            self.train_seconds += time.perf_counter() - t0
            return PendingRow(step, self._row_at)
        reading = guard.read()  # every pending step, this one included, checked before this update
        if reading.error:
            return self._failed(reading)
        if self.step_count % GOOD_COPY_EVERY == 0:
            guard.save_good(self.step_count)
        self.optimizer.step()
        self.scheduler.step()
        self.step_count = step
        *before, row = reading.finish(time.perf_counter())
        for r in before:
            self.history.append(r)
        self.train_seconds += time.perf_counter() - t0
        if evaluate:
            row.update(self.evaluate())
        row = self.history.append(row)
        if final:
            self.done = True
            self.callbacks.fire("done", self)
        return row

    def flush(self) -> None:
        """Bring the rows still on the device into ``history`` (one read); a bad step among them ends training
        as it would have at once. ``run`` calls it when it returns; a no-op on the CPU."""
        if self._guard.pending:
            reading = self._guard.read()
            if reading.error:
                self._failed(reading)
                return
            for r in reading.finish(time.perf_counter()):
                self.history.append(r)

    def _row_at(self, step: int) -> dict:
        """The row of ``step`` after a flush (a PendingRow's numbers); NaN numbers for a step a failure dropped."""
        self.flush()
        row = self.history.row(step)
        return row if row is not None else {"step": step, **{c: math.nan for c in self.history.columns[1:]}}

    def _failed(self, reading) -> dict:
        """A read found a bad step: training ends after the step before it (the guard kept those weights)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.error, self.done = reading.error, True
        rows = reading.finish(time.perf_counter())
        self.step_count = rows[-1]["step"] - 1
        for r in rows:
            self.history.append(r)
        self.callbacks.fire("done", self)
        return self.history.last()

    def run(self, n: int | None = None) -> pd.DataFrame:
        """Run ``n`` more steps (default: until ``train_config.steps``), or until ``stop()`` or a NaN; the history
        as a DataFrame. Uses ``train_config.num_threads`` torch threads while running. When stopped early, a
        final held-out evaluation and attention snapshot are added."""
        return run_steps(self, n)

    def finalize(self) -> None:
        """Mark training finished: evaluate the current weights (if not yet) and take a last snapshot."""
        self.flush()
        if self.done:
            return
        self.done = True
        last = self.history.last()
        if last and math.isnan(last["eval_mlm_loss"]) and not self.error:
            self.history.update_last(self.evaluate())
        self.callbacks.fire("done", self)

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out MLM/NSP loss and accuracy on fixed eval batches (same masks every time), eval mode; then fires
        ``evaluated`` (the live probe and the skills listen to it)."""
        if self._eval_batches is None:
            eb = self.data.fixed_eval_batches(self.config.eval_size, self.config.seed)
            self._eval_batches = [eb] if isinstance(eb, dict) else list(eb)
        model = self.model
        tot = torch.zeros(5, device=self.device)
        with eval_mode(model):
            for b in self._eval_batches:
                if len(b["nsp_labels"]) == 0:
                    continue
                b = to_device(b, self.device)
                with self.runtime.autocast():
                    out = model(b["input_ids"], token_type_ids=b["token_type_ids"],
                                attention_mask=b["attention_mask"], mlm_labels=b["mlm_labels"],
                                nsp_labels=b["nsp_labels"] if self.sentence_head else None)
                mlm_ok, n_sel, nsp_ok = self._correct(out, b)
                nb = float(len(b["nsp_labels"]))
                nsp_sum = out.nsp_loss.float() * nb if self.sentence_head else torch.zeros((), device=self.device)
                tot += torch.stack([torch.nan_to_num(out.mlm_loss.float()) * n_sel, mlm_ok, n_sel, nsp_sum,
                                    nsp_ok]).float()
            n_ex = sum(len(b["nsp_labels"]) for b in self._eval_batches)
        mlm_sum, mlm_ok, n_sel, nsp_sum, nsp_ok = tot.tolist()
        nan = float("nan")
        head = self.sentence_head and n_ex
        row = {"eval_mlm_loss": mlm_sum / n_sel if n_sel else nan, "eval_nsp_loss": nsp_sum / n_ex if head else nan,
               "eval_mlm_acc": mlm_ok / n_sel if n_sel else nan, "eval_nsp_acc": nsp_ok / n_ex if head else nan}
        self.callbacks.fire("evaluated", self, row=row)
        return row

    # ------------------------------------------------------------------ internals
    def _next_batches(self) -> list[dict]:
        """This process's micro-batches for the next optimizer step."""
        if hasattr(self.data, "step_batches"):
            return self.data.step_batches(self.step_count)
        return [self.data.sample_batch(self.config.batch_size, self._gen, split="train")
                for _ in range(self.runtime.grad_accum)]

    def running_ahead(self, target: int):
        """While ``run`` steps towards ``target``: the coming steps' batches are made ahead (bertcore.training.prefetch)."""
        return self.batches.ahead(self.step_count, target)

    def _accumulate_gradients(self, item: StepBatches) -> tuple[torch.Tensor, tuple[float, float, float]]:
        """Forward + backward over the micro-batches; returns the global [mlm_sum, nsp_sum, mlm_ok, nsp_ok] of the
        step on the device (no host read) and its global (masked tokens, examples, real tokens), counted on the CPU.

        Each micro-batch's mean losses are re-weighted by its share of the global masked tokens and examples
        (x world_size, which DDP's gradient averaging divides out again), so the gradient is that of the MLM
        mean over every masked token of the global batch plus the NSP mean over its examples (BERT §3.1, §3.2),
        however the batch is split over processes and accumulation steps.
        """
        rt, dev, batches = self.runtime, self.device, item.batches
        totals = [sum(c[k] for c in item.counts) for k in range(3)]  # masked tokens, examples, real tokens
        if rt.distributed:  # whole numbers: float32 sums them exactly
            totals = distributed.all_reduce_sum(torch.tensor(totals, device=dev), rt).tolist()
        n_sel_all, n_ex_all = max(totals[0], 1.0), max(totals[1], 1.0)
        acc = torch.zeros(4, device=dev)
        for i, (b, (n_sel, n_ex, _)) in enumerate(zip(batches, item.counts)):
            b = on_device(b, dev)
            sync = rt.distributed and i < len(batches) - 1
            with self._forward.no_sync() if sync else contextlib.nullcontext():  # all-reduce on the last only
                with rt.autocast():
                    out = self._forward(b["input_ids"], token_type_ids=b["token_type_ids"],
                                        attention_mask=b["attention_mask"], mlm_labels=b["mlm_labels"],
                                        nsp_labels=b["nsp_labels"] if self.sentence_head else None,
                                        **self._loss_only)
                loss = out.mlm_loss.float() * (n_sel / n_sel_all)
                if self.sentence_head:
                    loss = loss + out.nsp_loss.float() * (n_ex / n_ex_all)
                (loss * rt.world_size).backward()
            with torch.no_grad():
                hits = getattr(out, "mlm_hits", None)  # counted by the fused loss: no host read
                mlm_ok = hits.float() if hits is not None else self._correct(out, b)[0]
                nsp_ok = (out.nsp_logits.argmax(-1) == b["nsp_labels"]).sum().float()
                nsp_sum = out.nsp_loss.float().detach() * n_ex if self.sentence_head else torch.zeros((), device=dev)
                acc += torch.stack([out.mlm_loss.float().detach() * n_sel, nsp_sum, mlm_ok, nsp_ok])
        return distributed.all_reduce_sum(acc, rt), tuple(totals)

    @staticmethod
    def _correct(out, batch):
        """(#correct masked predictions, #selected positions, #correct NSP predictions) as 0-d tensors."""
        labels = batch["mlm_labels"]
        pos = getattr(out, "mlm_positions", None)
        targets = labels[pos] if pos is not None else labels[labels != -100]
        if getattr(out, "mlm_hits", None) is not None:  # counted by the loss (bertcore.model.functional)
            mlm_ok = out.mlm_hits.float()
        else:
            logits = out.mlm_logits
            if logits.dim() == 3:  # model returned full [B,T,V] logits
                logits = logits[labels != -100]
            mlm_ok = (logits.argmax(-1) == targets).sum().float()
        nsp_ok = (out.nsp_logits.argmax(-1) == batch["nsp_labels"]).sum().float()
        return mlm_ok, torch.tensor(float(targets.numel()), device=mlm_ok.device), nsp_ok
