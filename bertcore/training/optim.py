"""The optimiser set-up that pretraining (``bertcore.training.trainer``) and fine-tuning
(``bertcore.finetune.tuner``) share: AdamW with decoupled weight decay, no decay on biases and LayerNorm,
a linear warmup then a linear decay to 0 (BERT §A.2 pretraining, §A.3 fine-tuning), and the seed of the dropout
masks' private generator.
"""
from __future__ import annotations

import torch

# Mixed into the run's seed for the dropout generator, so the dropout masks are not the data order's stream.
DROPOUT_SALT = 0x5EED_D20B
RANK_STRIDE = 7919  # a prime: each process of a distributed run draws its own masks (rank 0 = a one-process run)


def dropout_seed(seed: int, rank: int = 0) -> int:
    """The seed of the dropout masks' generator for a run's ``seed`` on process ``rank``."""
    return (int(seed) ^ DROPOUT_SALT) + RANK_STRIDE * int(rank)


def takes_weight_decay(name: str, p: torch.Tensor) -> bool:
    """Matrices decay; biases, LayerNorm weights and every other vector do not (BERT's and HF's rule)."""
    return not (p.ndim < 2 or "LayerNorm" in name or name.endswith("bias"))


def lr_schedule(warmup: int, total: int):
    """The LR multiplier of update ``s`` (0-based): (s+1)/warmup during the warmup, then linear down to 0 at
    ``total``."""
    def f(s: int) -> float:
        if warmup > 0 and s < warmup:
            return (s + 1) / warmup
        return max(0.0, (total - s) / max(1, total - warmup))

    return f


def adamw(model: torch.nn.Module, lr: float, weight_decay: float, head: str | None = None,
          head_lr: float | None = None) -> tuple[torch.optim.AdamW, list]:
    """AdamW over ``model``'s trainable parameters, decayed and not; returns (optimizer, the parameters in group
    order). ``head``: the name prefix of a new layer (a fine-tune's ``classifier.``) that learns at ``head_lr``
    in groups of its own. Fused: one kernel for the whole update (on a CPU too)."""
    groups: dict[tuple[bool, bool], list] = {(h, d): [] for h in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        if p.requires_grad:  # (is the head, takes weight decay)
            groups[(head is not None and name.startswith(head), takes_weight_decay(name, p))].append(p)
    param_groups = [{"params": ps, "weight_decay": weight_decay if decay else 0.0}
                    | ({"lr": head_lr} if is_head and head_lr is not None else {})
                    for (is_head, decay), ps in groups.items() if ps or not is_head]
    return torch.optim.AdamW(param_groups, lr=lr, fused=True), [p for g in param_groups for p in g["params"]]


def scheduler(optimizer, warmup: int, total: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The warmup-then-linear-decay schedule on ``optimizer``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(warmup, total))
