"""Fine-tuning a (pre)trained encoder on a classification task (BERT §4.1; d2l §14.8).

``FineTuner`` is Trainer-shaped (``step() -> history row``, ``evaluate()``, ``run(n)``, ``stop()``, ``history``
(``bertcore.training.history.History``), ``callbacks``, ``done``, ``error``), so the training route drives it like
a pretraining ``Trainer`` (``bertcore.finetune.route``: run directories, callbacks, StopSignal). Where it starts
(a checkpoint, all-MiniLM-L6-v2 or random initial weights) is ``bertcore.finetune.models``.

* The pretraining optimizer set-up and step guard (``bertcore.training.optim``, ``bertcore.training.guard``):
  AdamW, linear warmup (10% of the steps by default) then linear decay, gradient-norm clipping (BERT §A.3 uses the same
  recipe with lr in {5e-5, 3e-5, 2e-5} at base size; a tiny model needs a larger lr). The new classifier layer
  learns at its own, larger ``head_lr``.
* Mini-batches walk seeded permutations of the labelled set (epochs); held-out accuracy every ``eval_every``
  steps and at the end, on the task's fixed held-out split.
* ``runtime`` (bertcore.training.device.Runtime): the device and precision, as for pretraining (the GPU, bf16
  autocast); the default is the CPU at fp32.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import pandas as pd
import torch

from bertcore.analysis.inference import encode_pair
from bertcore.config import JsonConfig, check_optimizer_fields, check_range
from bertcore.data.tasks import labelled_subset
from bertcore.errors import ConfigError
from bertcore.message import Message
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime, to_device
from bertcore.training.history import History
from bertcore.training.loop import Stoppable, run_steps
from bertcore.training.guard import nonfinite_step
from bertcore.training.optim import adamw, dropout_seed, scheduler
from bertcore.model.modes import eval_mode


@dataclass
class FinetuneConfig(JsonConfig):
    # Optimizer steps.
    steps: int = 150
    # Labelled examples per step (fewer if the labelled set is smaller).
    batch_size: int = 32
    # Peak AdamW learning rate of the (pre)trained encoder (tiny models; all-MiniLM-L6-v2 uses MINILM_LR).
    lr: float = 3e-4
    # Peak learning rate of the new classifier layer. It starts random and must catch up fast; at the encoder's
    # rate it drags the pretrained features along before it has learned to read them (Kumar et al. 2022).
    head_lr: float = 1e-2
    # Linear warmup steps, then linear decay to 0 at `steps`, as in TrainConfig. None = 10% of the steps, so a
    # longer fine-tune warms up longer (BERT §A.3 fine-tunes with the pretraining recipe).
    warmup_steps: int | None = None
    # AdamW decoupled weight decay, not on biases and LayerNorm (as in pretraining).
    weight_decay: float = 0.01
    # Clip the global gradient norm to this.
    grad_clip: float = 1.0
    # Labelled training examples drawn from the task's pool (0 = all).
    labels: int = 64
    # Seeds the classifier init, the labelled subset, the batch order and dropout.
    seed: int = 0
    # Held-out evaluation every N steps (and at the end).
    eval_every: int = 10
    # True = linear probe: the encoder is frozen and only the classifier trains.
    freeze_encoder: bool = False
    # Longest [CLS] A [SEP] B [SEP] (capped at the model's max_position_embeddings).
    max_seq_len: int = 64
    num_threads: int = 1

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_dict(cls, d: dict) -> FinetuneConfig:
        """A config from its JSON fields; one saved before warmup was counted in steps (``warmup_frac``, a share
        of ``steps``) loads as the same number of warmup steps."""
        d = dict(d)
        if "warmup_frac" in d:
            frac = d.pop("warmup_frac")
            check_range("warmup_frac", frac, 0.0, 1.0)
            if d.get("warmup_steps") is None:
                d["warmup_steps"] = int(round(frac * int(d.get("steps", cls.steps))))
        return super().from_dict(d)

    @property
    def warmup(self) -> int:
        """The warmup's length in steps (``warmup_steps``, or 10% of ``steps`` when it is None)."""
        return int(round(0.1 * self.steps)) if self.warmup_steps is None else min(int(self.warmup_steps), self.steps)

    def validate(self) -> None:
        check_range("steps", self.steps, 1, 100_000, int)
        check_range("batch_size", self.batch_size, 1, 1024, int)
        check_optimizer_fields(self)  # lr, warmup_steps, weight_decay, grad_clip, seed: as TrainConfig's
        check_range("head_lr", self.head_lr, 0.0, 100.0)
        check_range("labels", self.labels, 0, 10_000_000, int)
        check_range("eval_every", self.eval_every, 0, 100_000, int)
        check_range("max_seq_len", self.max_seq_len, 4, 8192, int)
        check_range("num_threads", self.num_threads, 1, 256, int)
        if not isinstance(self.freeze_encoder, bool):
            raise ConfigError(Message("freeze_encoder={value} must be true or false", value=repr(self.freeze_encoder)))


def _encode_examples(tokenizer, examples, max_len: int) -> dict:
    """Padded tensors input_ids, token_type_ids, attention_mask, labels for a list of TaskExample."""
    enc = [encode_pair(tokenizer, e.text_a, e.text_b, max_len)[:2] for e in examples]
    T = max(len(ids) for ids, _ in enc)
    ids = torch.full((len(enc), T), tokenizer.pad_id, dtype=torch.long)
    types = torch.zeros((len(enc), T), dtype=torch.long)
    for i, (a, t) in enumerate(enc):
        ids[i, :len(a)] = torch.tensor(a)
        types[i, :len(t)] = torch.tensor(t)
    lengths = torch.tensor([len(a) for a, _ in enc])
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": (torch.arange(T)[None] < lengths[:, None]).long(),
            "labels": torch.tensor([e.label for e in examples], dtype=torch.long), "lengths": lengths}


def _slice(batch: dict, idx: torch.Tensor) -> dict:
    out = {k: v[idx] for k, v in batch.items()}
    T = int(out["lengths"].max())  # pad only to this batch's longest example
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        out[k] = out[k][:, :T]
    return out


class FineTuner(Stoppable):
    """Fine-tunes a ``BertForSequenceClassification`` on ``task`` (see the module docstring)."""

    def __init__(self, model, tokenizer, task, config: FinetuneConfig, label: str = "model",
                 callbacks: Callbacks | None = None, runtime: Runtime | None = None):
        self.model, self.tokenizer, self.task, self.config, self.label = model, tokenizer, task, config, label
        if model.num_labels != task.num_labels:
            raise ConfigError(Message("the classifier has {n_model} classes but task {task} has {n_task}",
                                      n_model=model.num_labels, task=repr(task.name), n_task=task.num_labels))
        max_len = min(config.max_seq_len, model.config.max_position_embeddings)
        self.examples = labelled_subset(task, config.labels or None, config.seed)
        self.train_data = _encode_examples(tokenizer, self.examples, max_len)
        self.eval_data = _encode_examples(tokenizer, task.held_out, max_len)
        self.runtime = runtime if runtime is not None else Runtime()
        self.device = self.runtime.torch_device
        self._eval_on_device = None
        model.set_freeze_encoder(config.freeze_encoder)
        model.to(self.device).train()
        self._gen = torch.Generator().manual_seed(config.seed)  # batch order (on the CPU, whatever the device)
        model.set_dropout_generator(torch.Generator(self.device).manual_seed(dropout_seed(config.seed)))
        # the shared AdamW set-up (bertcore.training.optim); the new classifier layer learns at its own head_lr
        self.optimizer, self._params = adamw(model, config.lr, config.weight_decay, head="classifier.",
                                             head_lr=config.head_lr)
        self.scheduler = scheduler(self.optimizer, config.warmup, config.steps)
        self._order = torch.empty(0, dtype=torch.long)
        self._pos = 0
        self.step_count = 0
        self.done = False
        self.error: str | None = None
        self._stop = threading.Event()
        self.history = History.finetuning()
        self.callbacks = callbacks.copy() if callbacks is not None else Callbacks()

    @property
    def eval_accuracy(self) -> float:
        acc = self.history.last_eval().get("eval_accuracy")
        return math.nan if acc is None else acc


    def _next_indices(self) -> torch.Tensor:
        n = len(self.examples)
        b = min(self.config.batch_size, n)
        if self._pos + b > len(self._order):  # new epoch: a fresh seeded permutation
            self._order = torch.randperm(n, generator=self._gen)
            self._pos = 0
        idx = self._order[self._pos:self._pos + b]
        self._pos += b
        return idx

    def step(self) -> dict:
        """One optimizer step; returns the history row (eval_* NaN unless evaluated this step)."""
        if self.done:
            return self.history.last()
        batch = to_device(_slice(self.train_data, self._next_indices()), self.device)
        self.model.train()
        with self.runtime.autocast():
            out = self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["labels"])
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.float().backward()
        gnorm = torch.nn.utils.clip_grad_norm_(self._params, self.config.grad_clip) if self.config.grad_clip > 0 \
            else torch.tensor(0.0)
        loss = float(out.loss.detach().float())
        lr = self.optimizer.param_groups[0]["lr"]
        step = self.step_count + 1
        self.error = nonfinite_step(step, loss, float(gnorm), lr, "lower lr or head_lr")
        if self.error:  # never applied: the weights stay those after the step before
            self.done = True
            return {}
        self.optimizer.step()
        self.scheduler.step()
        self.step_count = step
        acc = float((out.logits.argmax(-1) == batch["labels"]).float().mean())
        row = {"step": step, "loss": loss, "accuracy": acc, "lr": lr, "eval_loss": math.nan,
               "eval_accuracy": math.nan}
        final = step >= self.config.steps
        if final or (self.config.eval_every and step % self.config.eval_every == 0):
            row.update(self.evaluate())
        row = self.history.append(row)
        self.done = final
        return row

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Held-out loss and accuracy on the task's fixed held-out split (eval mode, no dropout)."""
        if self._eval_on_device is None:
            self._eval_on_device = to_device(self.eval_data, self.device)
        with eval_mode(self.model), self.runtime.autocast():
            d = self._eval_on_device
            out = self.model(d["input_ids"], d["token_type_ids"], d["attention_mask"], d["labels"])
        acc = float((out.logits.argmax(-1) == d["labels"]).float().mean())
        return {"eval_loss": float(out.loss.float()), "eval_accuracy": acc}

    def finalize(self) -> None:
        """Stopped early: evaluate the weights we keep (once) and mark done."""
        last = self.history.last()
        if last and math.isnan(last["eval_accuracy"]):
            self.history.update_last(self.evaluate())
        self.done = True

    def run(self, n: int | None = None) -> pd.DataFrame:
        return run_steps(self, n)
