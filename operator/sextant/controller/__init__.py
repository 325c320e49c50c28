"""The operator: watches feed an in-memory view, the pure lifecycle decides, kube.py acts."""
