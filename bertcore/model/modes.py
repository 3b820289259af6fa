"""The one rule for reading a model as it predicts: eval mode (every dropout off, BERT §3.1's inference) and no
autograd, the model's training flag restored afterwards, even when the body raises."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def eval_mode(model, grad: bool = False):
    """``with eval_mode(model):`` dropout off and ``torch.inference_mode``; ``grad=True`` keeps autograd on (for
    gradient attributions). The training flag is restored on exit."""
    was_training = model.training
    model.eval()
    try:
        with contextlib.nullcontext() if grad else torch.inference_mode():
            yield model
    finally:
        model.train(was_training)
