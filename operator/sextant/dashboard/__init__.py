"""`sextant dashboard`: a local web view of queues, jobs, schedules and workers (docs/dashboard.md)."""
