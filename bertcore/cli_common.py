"""What every command of ``python -m bertcore`` shares: the parser that exits 2 with ``error: ...``, argument
types, the configs built from ``--preset`` / ``--set``, and checkpoint loading."""
from __future__ import annotations

import argparse

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports problems as ``error: ...`` (exit 2) without the usage dump."""

    def error(self, message):  # noqa: D401 - argparse API
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see `python -m {self.prog} --help`)\n")


class CliError(Exception):
    """Bad command-line input found after parsing (printed as ``error: ...``, exit 2)."""


def _int_in(lo: int, hi: int, what: str):
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


def _key_value(s: str) -> tuple[str, str]:
    if "=" not in s:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE (e.g. hidden_size=64), got {s!r}")
    k, v = s.split("=", 1)
    if not k.strip():
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE with a key, got {s!r}")
    return k.strip(), v.strip()


def _overrides(pairs) -> dict:
    out = {}
    for k, v in pairs:
        out[k] = v
    return out


def train_configs(args):
    from bertcore.config import PRESETS, BertConfig, TrainConfig, preset, split_overrides

    bert_kw, train_kw = {}, {}
    if args.preset is not None:
        if args.preset not in PRESETS:
            raise CliError(f"unknown preset {args.preset!r}; choose one of: {', '.join(PRESETS)}")
        bert_kw, train_kw = preset(args.preset, getattr(args, "size", "tiny"))
    b, t = split_overrides(_overrides(args.overrides))
    bert_kw.update(b)
    train_kw.update(t)
    if args.steps is not None:
        train_kw["steps"] = args.steps
    if args.seed is not None:
        train_kw["seed"] = args.seed
    return BertConfig(**bert_kw), TrainConfig(**train_kw), "vocab_size" in bert_kw


def load_bundle(path: str):
    from bertcore.io.checkpoint import load_checkpoint

    return load_checkpoint(path)
