"""The pure rules of the job lifecycle: the states and their transitions (states.py; transitions.py's reconcile and
admit, on what decision.py declares: the snapshot, the observations, the decision; endings.py: a running attempt's
stops and ends; step.py: the status edits of one step), what an attempt's pod or assignment tells (attempts.py),
backoff, GitOps health, worker mode (workers.py: who may take a job, reading a worker's Lease), schedules,
idempotency keys, retention, queueing (a job's place in line, what counts as queued) and reading a raw Job
(reading.py). Everything here is a function of (spec, status, observations, now) → (new status, actions), never of
when to write it (the operator's write policy: controller/writes.py): no I/O, no kopf, no environment, no clock
reads, no randomness of its own (the time and the idempotency window are passed in). It imports only resources/ and
itself, so that every rule is a unit test without a cluster (tests/unit/test_layering.py checks both)."""
