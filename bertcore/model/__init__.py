"""The BERT network (Devlin et al. 2019, §3): embeddings and encoder (``layers``), the pre-training model with
its MLM/NSP heads (``bert``), the sequence classifier (``classification``), shared functions (``functional``)
and the formulas a config stands for (``formulas``)."""
