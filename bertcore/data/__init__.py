"""Text in, training examples out: tokenizers, corpora, and BERT's masking and sentence pairs (§3.1, §3.2)."""
