"""`sextant worker`: a long-running process that serves queues and runs handlers as jobs are assigned to it, with no
pod per attempt (docs/workers.md is the protocol): which queues and handlers it serves (plan.py), its registration
Lease (registration.py), which jobs are its own (assignments.py: one watch with fieldSelector=status.worker=NAME),
the attempt's end recorded by the lifecycle's own rules (results.py), all of it together with stops and the drain
(service.py), its flags' defaults (settings.py), its command (main.py) and its metrics (metrics.py). An attempt
runs in-process through runner/execution.py, with pod mode's exit codes. It may import resources/, lifecycle/,
kube/, runner/, sdk.py and client.py; never controller/."""
