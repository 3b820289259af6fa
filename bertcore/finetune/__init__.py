"""Fine-tuning a (pre)trained encoder on a classification task (BERT §4.1), in one place:

* ``tuner``: ``FinetuneConfig`` and ``FineTuner`` (the Trainer-shaped fine-tuning loop);
* ``models``: where a fine-tune starts (a checkpoint, all-MiniLM-L6-v2, random initial weights), ``classify``,
  loading a fine-tuned classifier back, and ``summary_line`` (what pretraining bought);
* ``route``: fine-tune run directories on the one training route (``FINETUNE``);
* ``spec``: ``FinetuneSpec``, one fine-tune as a training process runs it (a cell of a fine-tune study);
* ``sweep``: the label sweep's points (held-out accuracy against the number of labels) from its study's data.

The comparison of what pretraining buys and the label sweep are fine-tune studies
(``bertcore.lab.studies.finetune_study``) run by the one study runner, ``bertcore.launch.study``. The classifier
model is ``bertcore.model.classification``; the tasks are ``bertcore.data.tasks``.
"""
