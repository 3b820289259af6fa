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
    # a model already in eval mode throughout (the app's models always are) is left alone: train() walks and sets
    # every submodule, twice per forward, and this check costs a fraction of that walk
    switch = was_training or any(m.training for m in model.modules())
    if switch:
        model.eval()
    try:
        with contextlib.nullcontext() if grad else torch.inference_mode():
            yield model
    finally:
        if switch:
            model.train(was_training)
