"""The `sextant` command line, also installed as the kubectl plugin `kubectl-sextant`: the user commands (main.py and
one module per noun: jobs, queues, schedules, workers, inspect, dashboard), how they print (output.py) and what they
share (context.py). Thin adapters over client.py; the composition root (sextant/__main__.py) adds the operator's and
dev's commands, so cli/ never imports controller/ or dev/. It may import resources/, lifecycle/, kube/, client.py,
and the commands it dispatches to: worker/main.py, runner/run.py, dashboard/ (the last two only when they run)."""
