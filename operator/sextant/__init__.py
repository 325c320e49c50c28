"""Sextant: a job queue that runs on Kubernetes."""

__version__ = "0.1.0"
