"""The training record: one owner for the rows a training writes, whoever reads them.

A ``History`` holds one row per optimizer step (a dict of floats, ``step`` an int); the held-out metrics of an
evaluation (BERT §3.1 masked-LM and §3.2 next-sentence accuracy and loss on fixed held-out batches) sit in the
row of the step they were taken after, NaN elsewhere. The trainer appends, the service saves it as
history.csv, the app's training thread hands the same object to the live chart, and a resumed run truncates
it to its checkpoint's step. It is thread-safe: a training thread appends while a page reads.

Readers take what they need without touching the rows: ``rows_since(n)`` (the live chart's new rows),
``series(columns, since)`` (the chart's lists, None for a missing value: the one conversion from rows to what a
chart draws), ``frame()`` (a DataFrame, cached until the next row) and ``last_eval()``.

On a GPU the trainer keeps a step's numbers on the device and reads them every few steps in one transfer
(bertcore.training.guard); until then ``Trainer.step`` hands out a ``PendingRow``, which reads them when asked.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import pandas as pd

PRETRAINING_EVAL_KEYS = ("eval_mlm_loss", "eval_nsp_loss", "eval_mlm_acc", "eval_nsp_acc")
PRETRAINING_COLUMNS = ("step", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s",
                       *PRETRAINING_EVAL_KEYS)
FINETUNE_EVAL_KEYS = ("eval_loss", "eval_accuracy")
FINETUNE_COLUMNS = ("step", "loss", "accuracy", "lr", *FINETUNE_EVAL_KEYS)


def number(value) -> float | None:
    """A finite float, or None (NaN, inf, text, missing): how a chart or JSON writes a missing value."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class History:
    """Rows of one training, in step order (see the module docstring). ``eval_keys[-1]`` marks an evaluation:
    a row whose value there is finite was evaluated."""

    def __init__(self, columns: Sequence[str], eval_keys: Sequence[str], rows: Iterable[dict] = ()):
        self.columns = tuple(columns)
        self.eval_keys = tuple(eval_keys)
        self._rows: list[dict] = []
        self._evals: list[int] = []  # indices of evaluated rows
        self._lock = threading.Lock()
        self._frame: pd.DataFrame | None = None
        for r in rows:
            self.append(r)

    @classmethod
    def pretraining(cls, rows: Iterable[dict] = ()) -> History:
        return cls(PRETRAINING_COLUMNS, PRETRAINING_EVAL_KEYS, rows)

    @classmethod
    def finetuning(cls, rows: Iterable[dict] = ()) -> History:
        return cls(FINETUNE_COLUMNS, FINETUNE_EVAL_KEYS, rows)

    @classmethod
    def read_frame(cls, frame: pd.DataFrame | None, columns: Sequence[str] = PRETRAINING_COLUMNS,
                   eval_keys: Sequence[str] = PRETRAINING_EVAL_KEYS) -> History:
        """A History from a saved history.csv's DataFrame (columns it lacks are NaN, others are dropped)."""
        h = cls(columns, eval_keys)
        if frame is not None and len(frame) and "step" in frame:
            for r in frame.to_dict("records"):
                h.append(r)
        return h

    # ------------------------------------------------------------------ writing
    def _clean(self, row: dict) -> dict:
        out = {"step": int(row["step"])}
        for c in self.columns[1:]:
            v = number(row.get(c))
            out[c] = math.nan if v is None else v
        return out

    def append(self, row: dict) -> dict:
        """Add the row of the next step (unknown keys dropped, missing ones NaN); returns the stored row."""
        clean = self._clean(row)
        with self._lock:
            self._rows.append(clean)
            if self._evaluated(clean):
                self._evals.append(len(self._rows) - 1)
            self._frame = None
        return dict(clean)

    def update_last(self, values: dict) -> None:
        """Merge ``values`` into the last row (an evaluation added after a run was stopped early)."""
        with self._lock:
            if not self._rows:
                return
            was = self._evaluated(self._rows[-1])
            self._rows[-1] = self._clean({**self._rows[-1], **values})
            if not was and self._evaluated(self._rows[-1]):
                self._evals.append(len(self._rows) - 1)
            self._frame = None

    def truncate(self, step: int) -> None:
        """Drop the rows after ``step`` (a resumed run continues from its checkpoint there)."""
        with self._lock:
            self._rows = [r for r in self._rows if r["step"] <= step]
            self._evals = [i for i in self._evals if i < len(self._rows)]
            self._frame = None

    # ------------------------------------------------------------------ reading
    def _evaluated(self, row: dict) -> bool:
        return math.isfinite(row.get(self.eval_keys[-1], math.nan))

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def last_step(self) -> int:
        with self._lock:
            return self._rows[-1]["step"] if self._rows else 0

    @property
    def n_evals(self) -> int:
        return len(self._evals)

    def last(self) -> dict:
        """The last row (a copy; {} before the first step)."""
        with self._lock:
            return dict(self._rows[-1]) if self._rows else {}

    def row(self, step: int) -> dict | None:
        """A copy of the row of ``step`` (None when there is none)."""
        with self._lock:
            for r in reversed(self._rows):
                if r["step"] == step:
                    return dict(r)
                if r["step"] < step:
                    break
        return None

    def rows_since(self, n: int = 0) -> list[dict]:
        """Copies of the rows from index ``n`` on."""
        with self._lock:
            return [dict(r) for r in self._rows[n:]]

    def last_eval(self) -> dict:
        """{"step", eval keys (None where not finite)} of the last evaluated row; {} before the first evaluation."""
        with self._lock:
            if not self._evals:
                return {}
            row = self._rows[self._evals[-1]]
        return {"step": row["step"], **{k: number(row[k]) for k in self.eval_keys}}

    def series(self, columns: Sequence[str], since: int = 0, evals_only: bool = False) -> list[list]:
        """``[step, value of each column]`` per row from index ``since`` on (of the evaluated rows only, with
        ``evals_only``), None for a missing value: what a chart draws."""
        with self._lock:
            rows = [self._rows[i] for i in self._evals[since:]] if evals_only else self._rows[since:]
            return [[r["step"], *(number(r.get(c)) for c in columns)] for r in rows]

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (``step`` int64, the rest float64), cached until the next change."""
        with self._lock:
            if self._frame is None:
                df = pd.DataFrame(self._rows, columns=list(self.columns))
                self._frame = df.astype({"step": "int64", **{c: "float64" for c in self.columns[1:]}})
            return self._frame

    def to_csv(self) -> str:
        return self.frame().to_csv(index=False)


class PendingRow(Mapping):
    """The row of a step whose numbers are still on the device: ``row["step"]`` is known at once, any other key
    (or ``dict(row)``) makes the trainer read its pending rows first (``read(step)`` gives the stored row). It is
    never an evaluated row: a step that evaluates reads its numbers and returns a plain dict."""

    def __init__(self, step: int, read: Callable[[int], dict]):
        self.step, self._read, self._row = int(step), read, None

    def _data(self) -> dict:
        if self._row is None:
            self._row = self._read(self.step)
        return self._row

    def __getitem__(self, key):
        return self.step if key == "step" else self._data()[key]

    def __iter__(self) -> Iterator:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return f"PendingRow(step={self.step})" if self._row is None else repr(self._row)
