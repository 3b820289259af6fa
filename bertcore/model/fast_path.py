"""The training fast path's switches for a GPU: fused attention dropout, a padded vocabulary, unpadded sequences and
compiled layers. Each computes the numbers of the readable path (BERT §3: the same function of the same weights);
none of them is on where it would change a CPU run's curve, and ``trace`` never takes them (a tap forces the
readable path).

``FastPath.for_device(device)`` is what a trainer asks for: everything on CUDA, nothing on a CPU. A model holds its
switches in ``model.fast`` (``BertForPreTraining`` and ``BertModel``; off when built).

* **Fused attention dropout** (``fused_dropout``): no private dropout generator, so attention dropout runs inside
  ``F.scaled_dot_product_attention(..., dropout_p=p)`` (its fused kernels never materialise the (B, H, T, T)
  probabilities) and every other dropout is ``F.dropout``; the masks come from the device's default generator,
  which the trainer reseeds at the start of every step from (seed, rank, step) (:func:`seed_device_dropout`).
  A run is reproducible per seed, resumes reproducibly (the seed of a step is a function of its number), and rank
  r > 0 draws other masks than rank 0. The limit: the default generator is one per device and process, so two
  trainings that step *at the same time* in one process (two threads) interleave their draws; the app runs each
  training in its own process and the CLI trains one per process, so only a Python caller who steps two trainers
  in threads meets it (sequential trainers in one process are unaffected: each step reseeds).
* **Padded vocabulary** (``vocab_multiple``): the MLM decoder's matmuls run over V rounded up to a multiple of 64
  (tensor-core friendly shapes); the extra rows are zero weights with a -inf bias, made in memory for the loss
  only, so their logits never win and their probability is exactly 0. The stored weights, checkpoints, HF
  export and every output (fill-mask, logits, lens, trace) keep exactly ``vocab_size`` rows.
* **Unpadded sequences** (``unpad_above``): when the batch's [PAD] share exceeds it, the real tokens are gathered
  into (N, D) for the dense parts (projections, FFN, LayerNorms) and scattered back to (B, T, ·) only for the
  attention product (:class:`Unpadded`). Needs the padding mask (``config.attention_padding_mask``): without
  it, [PAD] keys are attended and unpadding would change the numbers, so it stays off.
* **Compiled layers** (``compile_layers``): each encoder layer's fast forward through one ``torch.compile``d
  function (shapes dynamic), so bias + GELU and dropout + residual + LayerNorm become single kernels. Set on CUDA
  when the run asks to compile (``--compile``); never on a CPU by default.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

VOCAB_MULTIPLE = 64  # tensor cores want matrix sides in multiples of 8 (bf16); 64 is what Megatron and others pad to
UNPAD_ABOVE = 0.10  # unpad when more than 10% of a batch's positions are [PAD] (below, the gather/scatter costs more)


@dataclass
class FastPath:
    fused_dropout: bool = False
    vocab_multiple: int = 1  # 1 = no padding
    unpad_above: float | None = None  # None = never unpad
    compile_layers: bool = False
    compile_backend: str = "inductor"  # "eager" traces the graph without generating code (the CPU tests)

    @classmethod
    def for_device(cls, device: torch.device | str, compile: bool = False) -> FastPath:
        """Every switch on CUDA (compiled layers only when ``compile``), none on a CPU (its curves stay those of the
        private-generator path, bit for bit)."""
        if torch.device(device).type != "cuda":
            return cls()
        return cls(fused_dropout=True, vocab_multiple=VOCAB_MULTIPLE, unpad_above=UNPAD_ABOVE, compile_layers=compile)


def device_dropout_seed(seed: int, rank: int, step: int) -> int:
    """The seed of the device's default generator for optimizer step ``step`` of rank ``rank`` of run ``seed``:
    a 63-bit mix (splitmix64's finaliser) so neighbouring seeds, ranks and steps give unrelated streams."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + int(rank) * 0xBF58476D1CE4E5B9 + int(step) * 0x94D049BB133111EB) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return (z ^ (z >> 31)) >> 1


def seed_device_dropout(device: torch.device, seed: int, rank: int, step: int) -> None:
    """Reseed ``device``'s default generator for one optimizer step (fused dropout draws from it). Host-only: no
    synchronisation with the GPU."""
    s = device_dropout_seed(seed, rank, step)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()
                                      ].manual_seed(s)
    else:
        torch.manual_seed(s)


class Unpadded:
    """The real tokens of a padded batch: ``index`` (N,) their flat positions in (B * T), so (B, T, D) -> (N, D)
    is a gather and back a scatter into zeros. ``mask`` (B, 1, 1, T) is the attention's key mask."""

    def __init__(self, attention_mask: Tensor, mask: Tensor):
        self.B, self.T = attention_mask.shape
        self.index = attention_mask.reshape(-1).nonzero().squeeze(1)  # (N,)
        self.mask = mask

    @staticmethod
    def share(attention_mask: Tensor) -> float:
        """The share of [PAD] positions in a (B, T) 1/0 mask."""
        return 1.0 - float(attention_mask.sum()) / max(attention_mask.numel(), 1)

    def unpad(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (N, ...)."""
        return x.reshape(self.B * self.T, *x.shape[2:]).index_select(0, self.index)

    def pad(self, x: Tensor) -> Tensor:
        """(N, ...) -> (B, T, ...), zeros at [PAD]."""
        out = x.new_zeros(self.B * self.T, *x.shape[1:])
        return out.index_copy(0, self.index, x).view(self.B, self.T, *x.shape[1:])


def padded_decoder(weight: Tensor, bias: Tensor | None, multiple: int) -> tuple[Tensor, Tensor | None]:
    """The MLM decoder (V x D weight, V bias) with zero rows and -inf biases up to a multiple of ``multiple`` rows,
    made for one loss: a padded logit is -inf, never the top one, and its softmax probability is 0, so the loss, the
    hits and the gradients of the real rows are those of the unpadded decoder (the padding's gradient is dropped by
    the pad's backward). Under autocast the weight is cast first, so the pad copies the half-size tensor."""
    v = weight.shape[0]
    extra = -v % multiple
    if multiple <= 1 or extra == 0:
        return weight, bias
    if torch.is_autocast_enabled(weight.device.type):
        dtype = torch.get_autocast_dtype(weight.device.type)
        weight = weight.to(dtype)
    if bias is None:
        bias = weight.new_zeros(v)
    return F.pad(weight, (0, 0, 0, extra)), torch.cat([bias, bias.new_full((extra,), float("-inf"))])


_COMPILED: dict[str, object] = {}


def compiled(fn, backend: str):
    """``torch.compile(fn, dynamic=True)`` made once per function and backend in a process (every layer shares it:
    the weights are arguments, so the layers do not compile one by one). A layer traces as one graph (the CPU test
    counts no graph break); fullgraph stays off so that a break on some GPU build slows a run instead of ending it."""
    key = f"{fn.__module__}.{fn.__qualname__}:{backend}"
    c = _COMPILED.get(key)
    if c is None:
        c = _COMPILED[key] = torch.compile(fn, dynamic=True, backend=backend)
    return c
