"""The pure rules of the job lifecycle (seeds/job-lifecycle.txt): no I/O, no kopf, no clock reads.

Everything here is a function of (spec, status, observations, now) → (new status, actions).
"""
