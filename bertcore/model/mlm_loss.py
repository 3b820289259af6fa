"""The MLM loss straight from the encoder's output at the masked positions, for a training step.

``BertForPreTraining(..., return_mlm_logits=False)`` asks for it: the head's transform runs as usual, then its
decoder and the cross-entropy over the whole vocabulary run fused (``bertcore.model.functional.
linear_cross_entropy_and_hits``), so the (N, V) logits are never kept. The loss, its gradients and the hit count
are those of the logits path (BERT §3.1); only the memory traffic differs, which is what a large vocabulary (a
Chinese text's several thousand characters) costs most of on a CPU.
"""
from __future__ import annotations

from torch import Tensor

from bertcore.model.fast_path import padded_decoder
from bertcore.model.functional import linear_cross_entropy_and_hits


def decoder_of(head) -> tuple[Tensor, Tensor | None]:
    """(weight V x D, bias V) of a ``BertLMPredictionHead``'s last layer: the tied word embeddings and the output
    bias (mlm_head "transform"), or its own decoder (``linear``, ``mlp``)."""
    if head.kind == "transform":
        return head._tied[0].weight, head.bias
    return head.decoder.weight, head.decoder.bias


def mlm_loss_and_hits(head, h: Tensor, targets: Tensor, vocab_multiple: int = 1) -> tuple[Tensor, Tensor]:
    """(mean MLM cross-entropy, number of rows whose target has the top logit) of ``head`` (a
    ``BertLMPredictionHead``) on the hidden states ``h`` (N, D) of the masked positions against ``targets`` (N,):
    the values ``cross_entropy_and_hits(head(h), targets)`` gives. ``vocab_multiple`` > 1 runs the decoder over
    V padded to that multiple (``fast_path.padded_decoder``: padded logits are -inf); the values are the same."""
    if head.kind != "linear":
        h = head.transform(h)
    weight, bias = padded_decoder(*decoder_of(head), vocab_multiple)
    return linear_cross_entropy_and_hits(h, weight, bias, targets)
