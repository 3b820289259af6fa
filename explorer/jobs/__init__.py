"""Background jobs of the app: a training in its own process (``training_run``), the server's training slots, the
Train page's form (what it builds for a training), fine-tune comparisons and sweeps, SAE jobs."""
