"""The pure rules of the job lifecycle: the states and their transitions (states.py; transitions.py's reconcile and
admit), what an attempt's pod tells (attempts.py), backoff, GitOps health, worker mode (workers.py: who may take a
job, reading a worker's Lease), schedules, idempotency keys, retention, queueing (a job's place in line, what counts
as queued) and reading a raw Job (reading.py). Everything here is a function of (spec, status, observations, now) →
(new status, actions): no I/O, no kopf, no environment, no clock reads, no randomness of its own (the time and the
idempotency window are passed in). It imports only resources/ and itself, so that every rule is a unit test without
a cluster (tests/unit/test_layering.py checks both)."""
