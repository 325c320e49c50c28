"""The benchmark of issue 10: Sextant against the Kubernetes Job controller. Run it with `make bench` or
`.venv/bin/python -m bench --help`; it is not part of `make test` (tests/cluster/test_bench_smoke.py runs a tiny
version of it so that it never rots)."""
