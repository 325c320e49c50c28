"""Kubernetes plumbing for every process (operator, runner, worker, CLI, dashboard, dev tools): the async client
(client.py: JSON in and out, retries, typed errors), kubeconfig and in-cluster credentials (kubeconfig.py), fast
JSON decoding (jsontext.py), list+watch informers and their work queue (informer.py, workqueue.py), Events
(events.py), time helpers (times.py) and the process-wide metrics registry (metrics.py). Nothing here knows a
lifecycle rule: it imports only resources/."""
