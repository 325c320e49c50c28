"""`sextant dashboard`: a local web view of queues, jobs, schedules and workers (docs/dashboard.md): the server
(server.py), the HTML (pages.py) and the pure view models (views.py). It acts with the user's own credentials through
client.py, as the CLI does. It may import resources/, lifecycle/, kube/ and client.py; cli/dashboard.py (its flags)
imports it only when the command runs."""
