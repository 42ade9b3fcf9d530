"""Effects: the only modules of the operator that do I/O (the Kubernetes API, the SCMs, the HTTP endpoints)."""
