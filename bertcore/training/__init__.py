"""Pre-training: the trainer loop and the one training route every front end uses."""
