"""What a trained model says and why: fill-mask, P(IsNext), attentions and hidden states."""
