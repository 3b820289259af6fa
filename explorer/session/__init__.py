"""One browser's state and what it may reach: the session (``state``: the active model, the runs), its workspace on
disk (``workspace``), corpora and uploads, the per-session memo, and the access rules of a shared server (folders,
read-only share links, per-client caps)."""
