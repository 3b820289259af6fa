"""bertcore: a from-scratch BERT (Devlin et al. 2019) that trains, predicts and explains itself.

Import each name from the module that defines it (docs/CONTRACT.md lists them), e.g.::

    from bertcore.config import BertConfig, TrainConfig
    from bertcore.training.trainer import Trainer
    from bertcore.data.corpus import builtin_corpus
    from bertcore.analysis.inference import fill_mask
"""
import os as _os

# Measured on 2 cores: with the UI busy on one core, OpenMP's active spin-wait made training 3.5x slower.
# It must be set before torch is imported to take effect.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
