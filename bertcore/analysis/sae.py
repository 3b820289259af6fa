"""A sparse autoencoder (SAE) on one named activation of a model: dictionary learning of its features.

    f(x) = act((x − b_dec) W_enc + b_enc)        x̂ = f W_dec + b_dec

``W_enc`` is (d_in, d_sae), ``W_dec`` (d_sae, d_in), as SAELens stores them (``bertcore.io.sae_io``). Two
activations, both as the field trains them:

* ``standard``: ReLU, trained with an L1 penalty on ``f_i · ‖W_dec,i‖`` (Bricken et al. 2023, "Towards
  Monosemanticity"; the decoder-norm-weighted form of Anthropic's April 2024 update), with *resampling* of dead
  features (Bricken et al.): every ``steps / 6`` steps (until 80% of training) a feature silent for the last
  ``dead_window`` steps gets the direction of an input the SAE reconstructs badly (drawn with probability ∝ the
  square of its reconstruction loss), its encoder row scaled to 0.2 × the mean live encoder norm, its bias 0, and
  its Adam moments cleared.
* ``topk``: keep the k largest pre-activations, then ReLU (Gao et al. 2024, "Scaling and evaluating sparse
  autoencoders" §2.3), decoder rows kept at unit norm, the encoder initialised as the decoder's transpose, and the
  AuxK loss (§A.2) that lets the ``aux_k`` largest *dead* latents reconstruct the residual error, so dead features
  get a gradient and come back.

Training sees the activations scaled to a mean squared norm of ``d_in`` (Gao et al. §2.1); the scale is folded
back into the weights afterwards, so the saved SAE reads raw activations and its unit-norm decoder rows are unit
norm in the model's own space (for top-k the selection is unchanged: ``topk(s·z) = s·topk(z)``). Every random
choice (init, batch order, resampling) comes from one ``torch.Generator(seed)`` on the CPU, so a run on the GPU
(``runtime``, bertcore.training.device) draws the same batches; the trained SAE comes back on the CPU.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from bertcore.errors import InputError
from bertcore.message import Message
from bertcore.model.sae import ARCHITECTURES, SparseAutoencoder
from bertcore.training.device import Runtime

DENSE_FREQUENCY = 0.1  # a feature active on more than 10% of tokens is "dense" (Gao et al. report the same idea)


@dataclass
class SAETrainConfig:
    """How one SAE is trained (the defaults: the default model's layer, 8× its width, top-k with k = 8)."""
    d_in: int
    d_sae: int
    architecture: str = "topk"
    k: int = 8  # top-k: active features per token
    l1: float = 3.0  # standard: the L1 coefficient (on activations scaled to mean squared norm d_in)
    steps: int = 400
    batch_size: int = 1024  # tokens per step
    lr: float = 4e-3  # Adam, constant after a 5% warm-up, linear decay over the last 20%
    seed: int = 0
    aux_k: int = 0  # top-k: dead latents for AuxK (0: d_in / 2, Gao et al. §A.2)
    aux_coef: float = 1 / 32
    dead_window: int = 30  # steps a feature may stay silent before it counts as dead (resampling / AuxK)

    def check(self) -> SAETrainConfig:
        if self.architecture not in ARCHITECTURES:
            raise InputError(Message("architecture {arch} is unknown; use 'topk' (--k) or 'standard' (--l1)",
                                     arch=repr(self.architecture)))
        if self.d_in < 1 or self.d_sae < 1:
            raise InputError(Message("an SAE needs d_in >= 1 and d_sae >= 1"))
        if self.architecture == "topk" and not 1 <= self.k <= self.d_sae:
            raise InputError(Message("k={k} must be between 1 and the dictionary size {n}", k=self.k, n=self.d_sae))
        if self.architecture == "standard" and not self.l1 > 0:
            raise InputError(Message("the L1 coefficient must be > 0 (e.g. --l1 3)"))
        return self

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- quality
@torch.no_grad()
def quality(sae: SparseAutoencoder, x: Tensor, batch: int = 8192) -> dict:
    """The figures the field reports on activations x (N, d_in): fraction of variance explained
    1 − Σ‖x − x̂‖² / Σ‖x − x̄‖², L0 (mean active features per token), the dead share (never active on x) and the
    dense share (active on more than ``DENSE_FREQUENCY`` of the tokens), and each feature's frequency."""
    err = total = l0 = 0.0
    fired = torch.zeros(sae.d_sae, dtype=torch.float64)
    mean = x.double().mean(0)
    for s in range(0, len(x), batch):
        xb = x[s:s + batch]
        f = sae.encode(xb)
        err += float(((xb - sae.decode(f)).double() ** 2).sum())
        total += float(((xb.double() - mean) ** 2).sum())
        active = f > 0
        l0 += float(active.sum())
        fired += active.sum(0).double()
    freq = fired / max(1, len(x))
    return {"variance_explained": 1.0 - err / max(total, 1e-30), "l0": l0 / max(1, len(x)),
            "dead_fraction": float((fired == 0).double().mean()),
            "dense_fraction": float((freq > DENSE_FREQUENCY).double().mean()),
            "mse": err / max(1, len(x)), "frequency": freq.float()}


# ----------------------------------------------------------------------------- training
def _lr_at(step: int, cfg: SAETrainConfig) -> float:
    warm = max(1, cfg.steps // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    decay_from = int(cfg.steps * 0.8)
    if step >= decay_from:
        return cfg.lr * max(0.0, (cfg.steps - step) / max(1, cfg.steps - decay_from))
    return cfg.lr


def _init(sae: SparseAutoencoder, x: Tensor, g: torch.Generator) -> None:
    d_sae, d_in = sae.W_dec.shape
    with torch.no_grad():
        w = torch.randn(d_sae, d_in, generator=g)
        w /= w.norm(dim=1, keepdim=True)
        if sae.architecture == "standard":
            w *= 0.1  # Anthropic's April 2024 update: small decoder norms at the start, the L1 on f·‖W_dec‖
        sae.W_dec.copy_(w)
        sae.W_enc.copy_(w.T)  # Gao et al. §A.1: the encoder starts as the decoder's transpose
        sae.b_dec.copy_(x[torch.randperm(len(x), generator=g)[:8192]].mean(0))
        sae.b_enc.zero_()


def _normalise_decoder(sae: SparseAutoencoder) -> None:
    with torch.no_grad():
        sae.W_dec /= sae.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)


def _aux_k_loss(sae: SparseAutoencoder, pre: Tensor, err: Tensor, dead: Tensor, aux_k: int) -> Tensor:
    """Gao et al. §A.2: the largest ``aux_k`` dead latents reconstruct the residual error x − x̂."""
    n_dead = int(dead.sum())
    if n_dead == 0:
        return pre.new_zeros(())
    masked = pre.masked_fill(~dead, float("-inf"))
    vals, idx = masked.topk(min(aux_k, n_dead), dim=-1)
    f_aux = torch.zeros_like(pre).scatter_(-1, idx, vals.relu())
    e_hat = f_aux @ sae.W_dec
    target = err.detach()
    return ((e_hat - target) ** 2).sum(-1).mean() / (target - target.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-8)


def _resample(sae: SparseAutoencoder, opt: torch.optim.Optimizer, x: Tensor, dead: Tensor,
              g: torch.Generator) -> int:
    """Bricken et al.'s resampling of the ``dead`` features (see the module docstring); returns how many."""
    idx = dead.nonzero().flatten()
    if not len(idx):
        return 0
    with torch.no_grad():
        sample = x[torch.randperm(len(x), generator=g)[:8192].to(x.device)]
        loss = ((sample - sae(sample)) ** 2).sum(-1)
        pick = torch.multinomial(loss.clamp_min(1e-12).cpu() ** 2, len(idx), replacement=len(idx) > len(sample),
                                 generator=g).to(x.device)  # drawn on the CPU generator whatever the device
        d = sample[pick] - sae.b_dec
        d = d / d.norm(dim=1, keepdim=True).clamp_min(1e-8)
        live = ~dead
        enc_norm = sae.W_enc[:, live].norm(dim=0).mean() if live.any() else torch.tensor(1.0)
        sae.W_dec[idx] = d * (sae.W_dec[live].norm(dim=1).mean() if live.any() else 0.1)
        sae.W_enc[:, idx] = d.T * 0.2 * enc_norm
        sae.b_enc[idx] = 0.0
        for p in (sae.W_enc, sae.b_enc, sae.W_dec):
            st = opt.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in st:
                    if p is sae.W_enc:
                        st[key][:, idx] = 0
                    else:
                        st[key][idx] = 0
    return len(idx)


def train_sae(x: Tensor, cfg: SAETrainConfig, progress=None, stop=None,
              runtime: Runtime | None = None) -> tuple[SparseAutoencoder, dict]:
    """Train an SAE on activations x (N, d_in), float32. ``progress(step, steps, loss)`` is called every 25
    steps; ``stop()`` returning True ends training early (the SAE so far is returned). ``runtime``: the device and
    precision of the steps (default CPU, fp32; bf16 runs the encoder and decoder under autocast, the loss in
    float32). Returns the SAE on the CPU (reading raw activations) and a log: the input scale, the steps done, the
    last losses and how many features were resampled."""
    cfg.check()
    if x.ndim != 2 or x.shape[1] != cfg.d_in:
        raise InputError(Message("the activations have shape {shape}; the SAE expects (tokens, {d})",
                                 shape=str(tuple(x.shape)), d=cfg.d_in))
    if len(x) < 2:
        raise InputError(Message("an SAE needs activations of at least 2 tokens; give a longer corpus"))
    g = torch.Generator().manual_seed(int(cfg.seed))
    x = x.float().contiguous()
    scale = math.sqrt(cfg.d_in) / float(x.norm(dim=1).pow(2).mean().sqrt().clamp_min(1e-8))
    xs = x * scale
    sae = SparseAutoencoder(cfg.d_in, cfg.d_sae, cfg.architecture, cfg.k)
    _init(sae, xs, g)
    rt = runtime if runtime is not None else Runtime()
    dev = rt.torch_device
    sae.to(dev)
    xs = xs.to(dev)
    opt = torch.optim.Adam(sae.parameters(), lr=cfg.lr, betas=(0.9, 0.999))
    last_fired = torch.zeros(cfg.d_sae, dtype=torch.long, device=dev)
    aux_k = cfg.aux_k or max(1, cfg.d_in // 2)
    order = torch.randperm(len(xs), generator=g)
    at, resampled, log_loss, done = 0, 0, float("nan"), 0
    resample_every = max(cfg.dead_window, cfg.steps // 6)
    for step in range(cfg.steps):
        if stop is not None and stop():
            break
        if at + cfg.batch_size > len(order):
            order, at = torch.randperm(len(xs), generator=g), 0
        xb = xs[order[at:at + cfg.batch_size].to(dev)]
        at += cfg.batch_size
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        with rt.autocast():
            pre = sae.pre_activation(xb)
            if cfg.architecture == "topk":  # decode from the k active rows only: the same x̂, ~d_sae/k less work
                vals, idx = pre.topk(cfg.k, dim=-1, sorted=False)
                vals = vals.relu()
                x_hat = torch.einsum("bk,bkd->bd", vals, sae.W_dec[idx]) + sae.b_dec
                last_fired[idx[vals > 0].unique()] = step
            else:
                f = sae.activate(pre)
                x_hat = sae.decode(f)
                last_fired[(f > 0).any(0)] = step
                f = f.float()  # the L1 term in float32 (a no-op at fp32)
        pre, x_hat = pre.float(), x_hat.float()
        err = xb - x_hat
        mse = (err ** 2).sum(-1).mean() / cfg.d_in
        dead = (step - last_fired) >= cfg.dead_window
        if cfg.architecture == "topk":
            loss = mse + cfg.aux_coef * _aux_k_loss(sae, pre, err, dead, aux_k)
        else:
            sparsity = (f * sae.W_dec.norm(dim=1)).sum(-1).mean() / cfg.d_in
            loss = mse + cfg.l1 * sparsity
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cfg.architecture == "topk":
            _normalise_decoder(sae)
        elif step and step % resample_every == 0 and step < int(cfg.steps * 0.8):
            n = _resample(sae, opt, xs, dead, g)
            resampled += n
            last_fired[dead] = step
        done = step + 1
        if progress is not None and (done % 25 == 0 or done == cfg.steps):
            log_loss = float(loss.detach())
            progress(done, cfg.steps, log_loss)
    sae.cpu()
    _fold_scale(sae, scale)
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae, {"input_scale": scale, "steps_done": done, "loss": log_loss, "resampled": resampled}


def _fold_scale(sae: SparseAutoencoder, s: float) -> None:
    """Make an SAE trained on s·x read x: b_dec /= s and b_enc /= s; then f and x̂ come out in x's units, W_enc and
    W_dec unchanged ((s x − b) W + c = s((x − b/s) W + c/s), and topk/ReLU commute with s > 0)."""
    with torch.no_grad():
        sae.b_dec /= s
        sae.b_enc /= s
