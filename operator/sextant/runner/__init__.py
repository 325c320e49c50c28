"""Running one attempt's handler: `sextant run`, the entrypoint of attempt pods (run.py), with what the operator tells
the pod (env.py), the payload read from the Job (payload.py), the attempt's Lease (lease.py) and ctx.jobs for job
chaining (chaining.py); and execution.py, which runs SDK functions and commands in a `sextant worker` process with pod
mode's exit codes, signals and environment. It may import resources/, lifecycle/, kube/, sdk.py and client.py; never
controller/ or worker/."""
