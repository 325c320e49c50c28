"""The operator's HTTP server (server.py: health, readiness, Prometheus metrics) and the /v2 API (api.py, with auth.py:
TokenReview and SubjectAccessReview; limits.py: its defences against load; models.py and openapi.py: its bodies and
OpenAPI document). The operator hosts it; it reads the operator's view through a protocol of its own (api.py's
JobView), so it never imports controller/. It may import resources/, lifecycle/, kube/ and client.py; its metrics are
in kube/metrics.py."""
