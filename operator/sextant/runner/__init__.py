"""The in-pod runner: `sextant run` is the entrypoint of attempt pods (lease heartbeat, payload, signals)."""
