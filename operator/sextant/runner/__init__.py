"""Running one attempt's handler: execution.py runs SDK functions and commands with the exit-code contract (0, 1, 86,
128+N), for `sextant run` in an attempt pod (run.py, its adapter: what the operator tells the pod (env.py), the
payload read from the Job (payload.py), the attempt's Lease (lease.py)) and for a `sextant worker` process alike;
the handlers' process plumbing (process.py: a command dies with its parent; a PID-1 worker is an init); ctx.jobs for
job chaining (chaining.py). It may import resources/, lifecycle/, kube/, sdk.py and client.py; never
controller/ or worker/."""
