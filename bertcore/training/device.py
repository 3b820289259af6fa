"""Where and how a Trainer computes: device, precision, gradient accumulation, torch.compile, and its process
group when it is one of several (bertcore.training.distributed).

* ``device``: ``cpu``, ``cuda`` (``cuda:LOCAL_RANK`` under torchrun) or ``auto`` (CUDA when available).
* ``precision``: ``fp32``, or ``bf16``: forward passes under ``torch.autocast(dtype=bfloat16)`` on CUDA and on
  CPU. Weights, gradients and AdamW moments stay float32 (mixed precision, Micikevicius et al. 2018); bf16 has
  float32's exponent range, so no loss scaling is needed. ``auto`` (``resolve_precision``): bf16 on a CUDA GPU
  that supports it, fp32 everywhere else, so a CPU run's default is exactly the fp32 run it always was.
* ``grad_accum``: micro-batches summed into one optimizer step (global batch = batch_size x grad_accum x
  world_size).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch

from bertcore.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
PRECISION_CHOICES = ("auto", *PRECISIONS)  # what --precision accepts; "auto" is resolved by resolve_precision
_PROCESS_FIELDS = ("rank", "world_size", "group")  # this process's place in a world: never written to JSON


@dataclass
class Runtime:
    device: str = "cpu"  # a resolved torch device string: "cpu" or "cuda:N"
    precision: str = "fp32"
    grad_accum: int = 1
    compile: bool = False
    rank: int = 0
    world_size: int = 1
    group: object = None  # torch.distributed process group (None: the default group when world_size > 1)
    deterministic: bool = False  # CUDA: deterministic kernels, bit-identical curves (bertcore.training.determinism)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision={self.precision!r} is unknown; use one of {', '.join(PRECISIONS)}")
        if not isinstance(self.grad_accum, int) or not 1 <= self.grad_accum <= 4096:
            raise ConfigError(f"grad_accum={self.grad_accum!r} must be a whole number in [1, 4096]")

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def label(self) -> str:
        """Where and how it trains, as the CLI, the Train page and run.json say it: ``"cuda:0, bf16"``, ``"cpu, fp32"``."""
        return f"{self.device}, {self.precision}"

    def to_dict(self) -> dict:
        """The settings another process needs to train the same way (JSON; the process group stays behind)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PROCESS_FIELDS}

    @classmethod
    def from_dict(cls, d: dict | None) -> "Runtime":
        """A Runtime from ``to_dict``'s JSON (unknown keys ignored, so an older or newer job file still loads)."""
        known = {f.name for f in fields(cls)} - set(_PROCESS_FIELDS)
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

    def autocast(self):
        """The forward pass's precision context (a no-op for fp32)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.torch_device.type, dtype=torch.bfloat16)


def resolve_device(name: str, local_rank: int = 0) -> str:
    """``auto|cpu|cuda`` -> a torch device string; ConfigError with the fix when CUDA is asked for but absent."""
    if name not in DEVICES:
        raise ConfigError(f"--device {name!r} is unknown; use one of {', '.join(DEVICES)}")
    has_cuda = torch.cuda.is_available()
    if name == "cuda" and not has_cuda:
        raise ConfigError("--device cuda: no CUDA GPU is visible to torch (torch.cuda.is_available() is False); "
                          "install a CUDA build of torch (see docs/INSTALL.md), check nvidia-smi, or use --device cpu")
    if name == "cuda" or (name == "auto" and has_cuda):
        n = torch.cuda.device_count()
        if local_rank >= n:
            raise ConfigError(f"process with local rank {local_rank} has no GPU ({n} visible); start at most {n} "
                              "processes per node (torchrun --nproc_per_node)")
        return f"cuda:{local_rank}"
    return "cpu"


def check_precision(precision: str, device: str) -> None:
    """bf16 needs hardware support on CUDA (compute capability 8.0+, e.g. A100, H100, RTX 30xx)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r} is unknown; use one of {', '.join(PRECISION_CHOICES)}")
    if precision == "bf16" and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise ConfigError("--precision bf16: this GPU has no bfloat16 support (it needs an Ampere or newer GPU); "
                          "use --precision fp32")


def resolve_precision(name: str, device: str) -> str:
    """``auto|fp32|bf16`` on a resolved ``device`` -> ``fp32`` or ``bf16``. ``auto`` is bf16 on a CUDA GPU with
    bfloat16 support (compute capability 8.0+), fp32 on the CPU and on older GPUs; an explicit ``bf16`` is checked
    by ``check_precision``."""
    if name == "auto":
        return "bf16" if str(device).startswith("cuda") and torch.cuda.is_bf16_supported() else "fp32"
    check_precision(name, device)
    return name


def resolve_runtime(device: str = "auto", precision: str = "auto", local_rank: int = 0, **kw) -> Runtime:
    """A ``Runtime`` from what a user asks for (``--device``, ``--precision``): ConfigError with the fix when the
    device is absent or the precision unsupported. ``kw``: the other Runtime fields (grad_accum, compile, ...)."""
    dev = resolve_device(device, local_rank)
    return Runtime(dev, resolve_precision(precision, dev), **kw)


def to_device(batch: dict, device: torch.device) -> dict:
    """A batch dict of tensors moved to ``device`` (pinned + non_blocking on CUDA)."""
    if device.type == "cpu":
        return batch
    return {k: (v.pin_memory().to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}
