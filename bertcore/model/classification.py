"""BERT for sequence (and sentence-pair) classification: fine-tuning, BERT §4.1 and Fig. 4 (a)/(b); d2l §14.8.

The pretrained encoder + pooler (``BertForPreTraining.bert``) is reused as is; one new linear layer maps the
pooled [CLS] representation, tanh(W h_[CLS] + b), to class logits. A sentence pair is packed exactly as for
NSP, ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1, so the same head serves both. Parameter names equal HF
transformers' ``BertForSequenceClassification`` (``bert.*`` + ``classifier.weight/bias``), so exporting is a
key-for-key copy. With ``nsp_head="first_token"`` (no pooler) the classifier reads h_[CLS] directly.

Modes (``freeze_encoder``): full fine-tuning updates every weight (BERT §4); a frozen encoder with a linear
probe trains only the classifier, which measures what the pretrained [CLS] representation already holds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.bert import BertModel, seeded
from bertcore.model.functional import dropout


@dataclass
class ClassifierOutput:
    loss: Tensor | None
    logits: Tensor  # (B, num_labels)


class BertForSequenceClassification(nn.Module):
    """``bert`` (encoder + pooler) -> dropout -> ``classifier`` Linear(hidden, num_labels)."""

    def __init__(self, config: BertConfig, num_labels: int, labels: list[str] | None = None):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"num_labels={num_labels} must be >= 2")
        self.config = config
        self.num_labels = int(num_labels)
        self.labels = list(labels) if labels is not None else [f"LABEL_{i}" for i in range(num_labels)]
        self.bert = BertModel(config)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.dropout_generator: torch.Generator | None = None
        self.freeze_encoder = False
        nn.init.normal_(self.classifier.weight, 0.0, config.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    @classmethod
    def from_pretraining(cls, pretrained, num_labels: int, labels: list[str] | None = None, seed: int = 0):
        """A classifier whose encoder + pooler are a copy of ``pretrained.bert`` (a ``BertForPreTraining``);
        the classifier layer is drawn from ``seed``. A missing pooler (e.g. all-MiniLM-L6-v2) keeps its
        weights random and trains with the rest."""
        with seeded(seed):
            model = cls(pretrained.config, num_labels, labels)
        missing, _ = model.bert.load_state_dict(pretrained.bert.state_dict(), strict=False)
        if missing:
            raise ValueError(f"the pretrained encoder lacks {missing[:3]}")
        return model

    def set_dropout_generator(self, gen: torch.Generator | None) -> None:
        """Draw every dropout mask from ``gen`` (also in dropout modules that carry a generator)."""
        self.dropout_generator = gen
        for m in self.modules():
            if hasattr(m, "generator") and isinstance(m, nn.Module):
                m.generator = gen

    def set_freeze_encoder(self, frozen: bool) -> None:
        """Linear probe: only ``classifier`` trains; the encoder also runs without dropout."""
        self.freeze_encoder = bool(frozen)
        for p in self.bert.parameters():
            p.requires_grad_(not frozen)

    def pooled(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
               attention_mask: Tensor | None = None) -> Tensor:
        """The sentence representation (B, D): tanh pooler over h_[CLS] (BERT §3.2), or h_[CLS] without pooler."""
        self.bert.train(self.training and not self.freeze_encoder)
        try:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_encoder):
                return self.bert(input_ids, token_type_ids, attention_mask)[1]  # (B, D)
        finally:
            self.bert.train(self.training)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None) -> ClassifierOutput:
        h = self.pooled(input_ids, token_type_ids, attention_mask)
        h = dropout(h, self.config.hidden_dropout_prob, self.training, self.dropout_generator)
        logits = self.classifier(h)  # (B, num_labels)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits)
