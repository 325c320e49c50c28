"""The in-pod runner: `sextant run` is the entrypoint of attempt pods (lease heartbeat, payload, signals);
execution.py runs an attempt's handler for it and for a worker alike."""
