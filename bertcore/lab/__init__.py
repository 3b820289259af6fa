"""The lab: the BERT paper's ablations (and their successors') rerun over seeds on the learner's machine."""
