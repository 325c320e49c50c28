"""The operator's HTTP server: health, readiness, Prometheus metrics and the /v2 API."""
