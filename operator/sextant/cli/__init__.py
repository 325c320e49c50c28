"""The `sextant` command line, also installed as the kubectl plugin `kubectl-sextant`."""
