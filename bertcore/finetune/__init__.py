"""Fine-tuning a (pre)trained encoder on a classification task (BERT §4.1), in one place:

* ``tuner``: ``FinetuneConfig`` and ``FineTuner`` (the Trainer-shaped fine-tuning loop);
* ``models``: where a fine-tune starts (a checkpoint, all-MiniLM-L6-v2, random initial weights), ``classify`` and
  loading a fine-tuned classifier back;
* ``route``: fine-tune run directories on the one training route (``FINETUNE``), and ``PairTuner`` /
  ``COMPARISON``: a pretrained model and its random-init twin in lock-step;
* ``comparison``: ``PretrainingComparison``, a comparison in a background thread (the Fine-tune page);
* ``sweep``: the label sweep (held-out accuracy against the number of labels);
* ``store``: saved comparisons read back for the Fine-tune page.

The classifier model is ``bertcore.model.classification``; the tasks are ``bertcore.data.tasks``.
"""
