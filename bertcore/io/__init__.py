"""Checkpoints on disk (safetensors + JSON, never pickle) and transformers import/export."""
