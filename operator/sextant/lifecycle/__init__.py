"""The pure rules of the job lifecycle (the product docs' job lifecycle): no I/O, no kopf, no clock reads.

Everything here is a function of (spec, status, observations, now) → (new status, actions).
"""
