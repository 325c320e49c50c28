"""Sextant: a job queue that runs on Kubernetes. Its packages, each owning one part (README, "Layout"; docs/operator.md,
"Layout: why this shape"): resources/ (the public API: the models and the names shared with users), lifecycle/ (the
pure rules), kube/ (Kubernetes plumbing for every process), controller/ (the operator), runner/ (`sextant run`, one
attempt's handler), worker/ (`sextant worker`), cli/, http/ and dashboard/ (the user-facing adapters) and dev/ (not
the product); beside them sdk.py (the handler SDK), client.py (the synchronous Python client) and __main__.py (the
`sextant` command's composition root, the one module outside controller/ that imports it). The import rules, checked
by tests/unit/test_layering.py: lifecycle/ and kube/ import only resources/ (and themselves), only controller/ and
__main__.py import controller/, only controller/ imports kopf, and no two packages import each other."""

__version__ = "0.1.0"
