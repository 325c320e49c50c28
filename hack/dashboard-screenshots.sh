#!/usr/bin/env bash
# The screenshots of docs/dashboard.md: tests/cluster/test_dashboard.py::test_screenshots fills a namespace on the
# local control plane (queues, jobs in every state, a schedule, a worker) and Playwright photographs each view into
# docs/img/. Needs `make setup browser`.
set -euo pipefail
cd "$(dirname "$0")/.."
SEXTANT_DASHBOARD_SCREENSHOTS="$PWD/docs/img" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/cluster/test_dashboard.py -k screenshots "$@"
