"""Fair design comparisons: start two model variants from the same initial weights where their shapes match.

Two variants built from the same seed do not share their initial weights once their parameter lists differ
(a pre-LN model has an extra final LayerNorm, a linear MLM head has no transform, sinusoidal positions have no
table), because each module draws from the RNG in turn. ``same_init`` copies every tensor of the reference
model into the other model whose name and shape match, and says which tensors could not be shared and why,
so a gap between two curves comes from the design switch, not from a luckier draw.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from bertcore.message import Message


@dataclass
class InitReport:
    """What ``same_init`` shared: parameter names copied, and (name, reason) pairs that kept their own init."""

    copied: list[str] = field(default_factory=list)
    own: list[tuple[str, str]] = field(default_factory=list)

    @property
    def all_shared(self) -> bool:
        return not self.own

    def summary(self) -> str:
        n, m = len(self.copied), len(self.copied) + len(self.own)
        if self.all_shared:
            return Message("both variants start from the same initial weights (all {n} tensors)", n=n)
        groups = sorted({_group(name) for name, _ in self.own})
        return Message("{n} of {m} tensors start from the same initial weights; {own} cannot be shared because "
                       "the designs differ there: {groups}", n=n, m=m, own=len(self.own), groups=", ".join(groups))


def _group(name: str) -> str:
    """A short readable label for a parameter name (its module path without the layer number and leaf)."""
    parts = [p for p in name.split(".") if not p.isdigit()]
    return ".".join(parts[:-1]) or name


@torch.no_grad()
def same_init(reference: torch.nn.Module, model: torch.nn.Module) -> InitReport:
    """Copy into ``model`` every parameter/buffer of ``reference`` with the same name and shape (in place)."""
    ref = dict(reference.named_parameters())
    report = InitReport()
    for name, p in model.named_parameters():
        src = ref.get(name)
        if src is None:
            report.own.append((name, "only in this variant"))
        elif src.shape != p.shape:
            report.own.append((name, f"shape {tuple(p.shape)} vs {tuple(src.shape)}"))
        else:
            p.copy_(src)
            report.copied.append(name)
    for name in ref:
        if name not in dict(model.named_parameters()):
            report.own.append((name, "only in the reference variant"))
    return report
