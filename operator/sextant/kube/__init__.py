"""Kubernetes plumbing for every process (operator, runner, worker, CLI, dashboard, dev tools): the async client
(client.py: JSON in and out, retries, and the typed errors ApiError, NotFound, Conflict, Gone that sextant/client.py
raises too), kubeconfig and in-cluster credentials (kubeconfig.py), fast JSON decoding (jsontext.py), the wall clock
(clock.py: utcnow), list+watch informers and their work queue (informer.py, workqueue.py), the rate-limited Event
recorder (events.py) and the process-wide metrics registry (metrics.py). Nothing here knows a lifecycle rule: it
imports only resources/ (and itself)."""
