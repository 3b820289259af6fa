"""A sparse autoencoder's weights and forward (SAELens's StandardSAE / TopKSAE, 6.x), the model that
bertcore.analysis.sae trains and bertcore.io.sae_io saves:

    f(x) = act((x − b_dec) W_enc + b_enc)        x̂ = f W_dec + b_dec

``standard``: act = ReLU (Bricken et al. 2023); ``topk``: the k largest pre-activations, then ReLU (Gao et al.
2024 §2.3).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

ARCHITECTURES = ("topk", "standard")


class SparseAutoencoder(nn.Module):
    """The SAE's four tensors and its encoder/decoder (SAELens's StandardSAE / TopKSAE forward, 6.x)."""

    def __init__(self, d_in: int, d_sae: int, architecture: str = "topk", k: int = 8):
        super().__init__()
        self.architecture, self.k = architecture, int(k)
        self.W_enc = nn.Parameter(torch.zeros(d_in, d_sae))
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(torch.zeros(d_sae, d_in))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    @property
    def d_in(self) -> int:
        return self.W_enc.shape[0]

    @property
    def d_sae(self) -> int:
        return self.W_enc.shape[1]

    def pre_activation(self, x: Tensor) -> Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: Tensor) -> Tensor:
        if self.architecture == "topk":  # the k largest pre-activations, then ReLU (SAELens's TopK)
            vals, idx = pre.topk(self.k, dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())
        return pre.relu()

    def encode(self, x: Tensor) -> Tensor:
        """Feature activations (..., d_sae) of activations x (..., d_in)."""
        return self.activate(self.pre_activation(x))

    def decode(self, f: Tensor) -> Tensor:
        return f @ self.W_dec + self.b_dec

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(self.encode(x))
