"""``--deterministic``: the same seed gives the same curve on a GPU too, bit for bit (on one GPU, one software stack).

On a CPU the trainer's curves are already deterministic: every random draw comes from its private seeded
generators and the CPU kernels it uses sum in a fixed order, so this module changes nothing there (turning torch's
deterministic mode on would only swap some CPU kernels for others and move the curves of runs that never asked).

On CUDA three things make two runs with the same seed differ in the last digits, and then, step after step, in
the curve (docs/TRAINING.md, "The same seed on a GPU"):

* backward kernels that add into one tensor with atomic adds (the embedding and index_add gradients, the
  attention gradients of SDPA's fused kernels), whose order of additions changes from run to run;
* cuBLAS picking split-K reductions and workspace use that depend on what else is queued;
* cuDNN choosing algorithms by timing them (``benchmark``) and its own attention kernels.

``apply(device)`` turns all of them to their deterministic versions for the rest of the process:
``torch.use_deterministic_algorithms(True)`` (an operation with no deterministic CUDA kernel raises instead of
silently differing; SDPA's flash and memory-efficient backward switch to their deterministic variants),
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS then reduces in a fixed order; it must be set before the first
cuBLAS call, so the CLI sets it right after reading its arguments), cuDNN's deterministic mode without
benchmarking, and no cuDNN attention. A training process is the unit: the CLI and the app's worker train in a
process of their own, so the setting stays with the run that asked for it.
"""
from __future__ import annotations

import os

import torch

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"  # 8 buffers of 4 MiB per stream: the setting NVIDIA documents for reproducible GEMMs


def prepare_environment() -> None:
    """Set ``CUBLAS_WORKSPACE_CONFIG`` unless the user set it: call it before CUDA starts (the CLI does)."""
    os.environ.setdefault(CUBLAS_ENV, CUBLAS_WORKSPACE)


def apply(device) -> bool:
    """Deterministic kernels for this process when ``device`` is a CUDA device; True when something was set.
    On the CPU it does nothing (the curves are deterministic already)."""
    if torch.device(device).type != "cuda":
        return False
    prepare_environment()
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)  # flash / memory-efficient / math SDPA only
    return True


def is_deterministic() -> bool:
    """Whether this process runs torch's deterministic kernels (what a benchmark prints next to its numbers)."""
    return torch.are_deterministic_algorithms_enabled()
