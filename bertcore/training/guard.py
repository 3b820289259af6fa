"""The guard of every pretraining step: a NaN, an infinity or a diverged loss is never applied, and training stops
with a message that says what to do. It also holds a step's numbers (losses, accuracies, gradient norm) until
they are read, so that on a GPU a step needs no host synchronisation.

Two ways to read, one set of rules (``StepGuard.read``):

* **at once** (the CPU): every step's numbers are read before its update, as the trainer always did. A bad step is
  not applied; the weights stay those after the step before (NaN / inf) or roll back to the last good copy
  (a diverged loss).
* **deferred** (CUDA): the step's numbers stay on the device. The check runs there too, in float64 so that it
  agrees bit for bit with the host's: a bad step raises a sticky device flag that fused AdamW reads as
  ``found_inf`` (the flag GradScaler uses), so it and every later update are skipped without the host knowing
  yet. Every ``GOOD_COPY_EVERY`` steps, and at every evaluation, snapshot and the end, the trainer reads the
  pending steps in one transfer; the first bad one ends training exactly as it would have at once: the same
  message, the same kept weights, the rows after it dropped.

The good copy (the weights a diverged run rolls back to) is taken every ``GOOD_COPY_EVERY`` steps, right after a
read found the step sane, before its update: the same steps either way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# A finite loss above DIVERGENCE_FACTOR x the untrained loss stops training (lr far too high); the weights
# roll back to the copy taken every GOOD_COPY_EVERY steps. On a GPU the numbers are read every GOOD_COPY_EVERY steps.
DIVERGENCE_FACTOR = 4.0
GOOD_COPY_EVERY = 10
FIX = "lower lr (e.g. <= 1e-2) or raise warmup_steps"


def nonfinite_step(step: int, loss: float, grad_norm: float, lr: float, fix: str) -> str | None:
    """The message for step ``step`` when its loss or gradient norm is NaN or infinite (the step is never applied:
    the weights stay those after the step before), else None. Pretraining and fine-tuning share it."""
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return None
    what = "loss" if not math.isfinite(loss) else "gradient norm"
    kind = "NaN" if math.isnan(loss if what == "loss" else grad_norm) else "infinite"
    return f"{what} became {kind} at step {step} (lr={lr:.3g}); {fix}; the last good weights (after step {step - 1}) are kept"


@dataclass
class _Pending:
    step: int
    values: torch.Tensor  # [mlm_sum, nsp_sum, mlm_ok, nsp_ok, grad_norm(, flagged)] on the device
    n_sel: float  # masked tokens, examples and real tokens of the (global) batch, counted on the CPU
    n_ex: float
    n_tok: float
    lr: float
    t0: float  # when the step began (time.perf_counter)


@dataclass
class Reading:
    """The rows of the steps read, in order; with ``error`` the last is the bad step's (training stops there)."""

    rows: list[dict] = field(default_factory=list)
    error: str | None = None
    tokens: float = 0.0
    since: float = 0.0

    def finish(self, now: float) -> list[dict]:
        """The rows with ``tokens_per_s``: the tokens of the steps read over the time since the first began."""
        tps = self.tokens / max(now - self.since, 1e-9)
        for r in self.rows:
            r.setdefault("tokens_per_s", tps)
        return self.rows


class StepGuard:
    """The NaN / divergence check of a trainer's steps (see the module docstring). ``deferred``: keep the numbers
    on the device and skip bad updates there (CUDA); otherwise the trainer reads every step before its update."""

    def __init__(self, params: list, optimizer, init_loss: float, device, deferred: bool = False,
                 sentence_head: bool = True):
        self.params, self.optimizer, self.init_loss = params, optimizer, init_loss
        self.sentence_head = sentence_head  # False (sentence_task=none): the rows' NSP numbers are NaN
        self.threshold = DIVERGENCE_FACTOR * init_loss
        self.deferred = bool(deferred)
        self.pending: list[_Pending] = []
        self.reads = 0  # host reads so far (a test counts them)
        self._good: list[torch.Tensor] | None = None
        self._good_step = 0
        self._flag = None
        if self.deferred:
            self._flag = torch.zeros((), device=device)  # 1.0 once a step was bad: fused AdamW skips its update
            optimizer.found_inf = self._flag

    # ------------------------------------------------------------------ one step
    def record(self, step: int, acc: torch.Tensor, grad_norm: torch.Tensor, counts, lr: float, t0: float) -> None:
        """Keep step ``step``'s numbers (``acc`` = [mlm_sum, nsp_sum, mlm_ok, nsp_ok], ``counts`` = (masked tokens,
        examples, real tokens), ``t0`` when it began); deferred, also check it on the device (no host read)."""
        n_sel, n_ex, n_tok = counts
        v = torch.cat([acc.float(), grad_norm.detach().reshape(1).float()])
        if self.deferred:
            d = v.double()  # the host's arithmetic: float32 values, float64 sums and quotients
            loss = d[0] / max(n_sel, 1.0) + d[1] / max(n_ex, 1.0)
            bad = ~(torch.isfinite(loss) & torch.isfinite(d[4])) | (loss > self.threshold)
            torch.maximum(self._flag, bad.float(), out=self._flag)
            v = torch.cat([v, bad.float().reshape(1)])
        self.pending.append(_Pending(step, v, n_sel, n_ex, n_tok, lr, t0))

    def read(self) -> Reading:
        """Read every pending step in one host transfer and check them in order (see the module docstring)."""
        pend, self.pending = self.pending, []
        if not pend:
            return Reading()
        vals = torch.stack([p.values for p in pend]).tolist()  # the one host synchronisation
        self.reads += 1
        out = Reading(since=pend[0].t0)
        for p, v in zip(pend, vals):
            mlm_sum, nsp_sum, mlm_ok, nsp_ok, gn = v[:5]
            mlm_loss, nsp_loss = mlm_sum / max(p.n_sel, 1.0), nsp_sum / max(p.n_ex, 1.0)
            loss = mlm_loss + nsp_loss
            finite = math.isfinite(loss) and math.isfinite(gn)
            if not finite or loss > self.threshold or (len(v) > 5 and v[5] > 0):
                out.error = self._failure(p, loss, gn, finite)
                out.rows.append({"step": p.step, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss, "mlm_acc": math.nan,
                                 "nsp_acc": math.nan, "lr": p.lr, "tokens_per_s": math.nan})
                return out
            out.tokens += p.n_tok
            head = self.sentence_head
            out.rows.append({"step": p.step, "mlm_loss": mlm_loss, "nsp_loss": nsp_loss if head else math.nan,
                             "mlm_acc": mlm_ok / p.n_sel if p.n_sel else math.nan,
                             "nsp_acc": nsp_ok / p.n_ex if head else math.nan, "lr": p.lr})
        return out

    def _failure(self, p: _Pending, loss: float, gn: float, finite: bool) -> str:
        if finite:  # exploded but finite: roll back to the last copy taken while the loss was sane
            good = self.restore_good(p.step - 1)
            return (f"loss diverged at step {p.step} (loss {loss:.3g}, more than 4x the {self.init_loss:.2f} "
                    f"of an untrained model; lr={p.lr:.3g}); {FIX}; the last good weights (after step "
                    f"{good}) are kept")
        return nonfinite_step(p.step, loss, gn, p.lr, FIX)

    # ------------------------------------------------------------------ the good copy
    @torch.no_grad()
    def save_good(self, step: int) -> None:
        """Copy the current weights (known good: they just gave a finite, sane loss) into reusable buffers."""
        if self._good is None:
            self._good = [p.detach().clone() for p in self.params]
        else:
            torch._foreach_copy_(self._good, [p.detach() for p in self.params])
        self._good_step = step

    @torch.no_grad()
    def restore_good(self, step_now: int) -> int:
        """Put the good copy back; the step it was taken after (``step_now`` when there is none)."""
        if self._good is None:
            return step_now
        torch._foreach_copy_([p.detach() for p in self.params], self._good)
        return self._good_step
