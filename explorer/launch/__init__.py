"""Launching from the app: a session's training (``launcher``: start, resume, stop, forget, adoption), the runner
it trains in (``training_run``: its own process), the server's training slots (``training_slots``), studies,
fine-tune comparisons and sweeps, SAE jobs. Widgets that show them are ``explorer.parts``."""
