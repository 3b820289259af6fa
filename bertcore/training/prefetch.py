"""Batches made ahead: the data of the next steps is built on a background thread while the current step runs.

Building a batch (drawing pairs, NSP negatives and BERT §3.1 masks, or reading examples from shards) and moving it
to the GPU happen between two steps when done on the training thread; on a GPU the chip then waits. A
``Prefetcher`` runs ``make(step)`` for the steps ``first .. last - 1`` in order on a thread of its own and keeps at
most ``depth`` finished steps in a bounded queue. On CUDA it pins each batch and copies it on a side stream; the
training thread makes its stream wait for that copy (``wait_event``) and marks the tensors as used there
(``record_stream``), so the caching allocator never hands their memory out while a kernel still reads it.

The order of the data does not change: the steps are made in order, and for the in-memory corpus the thread draws
from a copy of the trainer's generator; each step carries the generator's state after its draw, which the trainer
takes over when it uses the step. So the curve is the one without prefetching, bit for bit, and a resume file
written at any step holds the state of the data actually trained on.

``close()`` (also on leaving a ``with`` block: the end of ``run``, ``stop()``, Ctrl-C, an error) stops the thread
and waits for it; an error while making a batch is raised on the training thread at the step that needed it.
"""
from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bertcore.training.device import to_device

THREAD_NAME = "bertcore-prefetch"
JOIN_SECONDS = 30.0  # the longest close() waits for a batch being made


def batch_counts(batch: dict) -> tuple[float, float, float]:
    """(masked tokens, examples, real tokens) of a batch whose tensors are on the CPU (counted before the copy,
    so the training step never reads them back from the GPU)."""
    return (float((batch["mlm_labels"] != -100).sum()), float(len(batch["nsp_labels"])),
            float(batch["attention_mask"].sum()))


def on_device(batch: dict, device: torch.device) -> dict:
    """The batch on ``device``: as it is when a prefetcher already put it there, else moved (pinned, non-blocking)."""
    t = batch.get("input_ids")
    if device.type == "cpu" or (torch.is_tensor(t) and t.device == device):
        return batch
    return to_device(batch, device)


@dataclass
class StepBatches:
    """The micro-batches of one optimizer step (``step``: the trainer's step_count when it uses them)."""

    step: int
    batches: list[dict]
    counts: list[tuple[float, float, float]]  # batch_counts of each micro-batch
    rng_state: torch.Tensor | None = None  # the data generator's state after drawing them (in-memory corpus)
    ready: object = None  # a torch.cuda.Event recorded after the copy to the GPU

    @classmethod
    def of(cls, step: int, batches: list[dict], rng_state=None) -> StepBatches:
        return cls(step, batches, [batch_counts(b) for b in batches], rng_state)


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    """Makes ``make(step) -> (batches, rng_state or None)`` for ``first <= step < last`` ahead of use (see the
    module docstring). ``get(step)`` returns that step's ``StepBatches`` (None if the thread is not on that step:
    the caller then makes it itself)."""

    def __init__(self, make: Callable[[int], tuple[list[dict], object]], first: int, last: int,
                 device: torch.device | str = "cpu", depth: int = 2):
        self._make, self.first, self.last = make, int(first), int(last)
        self.device = torch.device(device)
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(depth)))
        self._stop = threading.Event()
        self._next = self.first  # the step get() expects
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the background thread
    def _stage(self, step: int, batches: list[dict], rng_state) -> StepBatches:
        item = StepBatches.of(step, batches, rng_state)
        if self._stream is not None:
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
                item.batches = [to_device(b, self.device) for b in batches]  # pinned, non-blocking, side stream
                item.ready = torch.cuda.Event()
                item.ready.record(self._stream)
        return item

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for step in range(self.first, self.last):
                if self._stop.is_set():
                    return
                batches, state = self._make(step)
                if not self._put(self._stage(step, batches, state)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, raised there
            self._put(_Failed(e))

    # ------------------------------------------------------------------ the training thread
    def get(self, step: int) -> StepBatches | None:
        """Step ``step``'s batches, waiting for the thread if needed; None when the thread does not make that
        step (a step outside ``first .. last - 1`` or out of order). Raises what making them raised."""
        if step != self._next or not self.first <= step < self.last:
            return None
        while True:
            try:
                item = self._queue.get(timeout=0.05)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return None
        if isinstance(item, _Failed):
            self.close()
            raise item.error
        self._next = step + 1
        if item.ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(item.ready)
            for b in item.batches:
                for v in b.values():
                    if torch.is_tensor(v):
                        v.record_stream(stream)
        return item

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread and wait for it (it finishes the batch it is making); the queue is emptied."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_SECONDS)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BatchSource:
    """Where a trainer's steps take their batches: ``next(step)`` makes them on the training thread with
    ``make_now()``, or, inside ``ahead(first, last)`` (the trainer's ``run``), takes them from a Prefetcher that
    makes them ``depth`` steps ahead (0: never). ``generator`` is the trainer's data generator: the thread draws
    from a copy, and ``next`` hands its state back, so the generator is always where a run without prefetching
    would have it (a resume file saves it)."""

    def __init__(self, data, generator: torch.Generator, batch_size: int, grad_accum: int, device: torch.device,
                 depth: int, make_now: Callable[[], list[dict]]):
        self.data, self.generator, self.batch_size, self.grad_accum = data, generator, batch_size, grad_accum
        self.device, self.depth, self.make_now = torch.device(device), int(depth), make_now
        self.prefetcher: Prefetcher | None = None

    def _maker(self):
        if hasattr(self.data, "step_batches"):  # shards: a step's batches are a function of the step alone
            return lambda step: (self.data.step_batches(step), None)
        gen = torch.Generator().manual_seed(0)
        gen.set_state(self.generator.get_state())
        data, bs, n = self.data, self.batch_size, self.grad_accum

        def make(step: int):
            return [data.sample_batch(bs, gen, split="train") for _ in range(n)], gen.get_state()

        return make

    @contextlib.contextmanager
    def ahead(self, first: int, last: int):
        """Make the batches of steps ``first .. last - 1`` ahead while the block runs; the thread ends with it."""
        if self.depth <= 0 or first >= last or self.prefetcher is not None:
            yield
            return
        with Prefetcher(self._maker(), first, last, self.device, self.depth) as self.prefetcher:
            try:
                yield
            finally:
                self.prefetcher = None

    def next(self, step: int) -> StepBatches:
        """The batches of optimizer step ``step`` (0-based)."""
        if self.prefetcher is not None:
            item = self.prefetcher.get(step)
            if item is not None:
                if item.rng_state is not None:
                    self.generator.set_state(item.rng_state)  # as if the training thread had drawn them
                return item
            self.prefetcher.close()  # out of step (a state loaded mid-run): made here from now on
        return StepBatches.of(step, self.make_now())
