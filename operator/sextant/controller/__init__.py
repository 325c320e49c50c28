"""The operator, and only the operator: informers feed an in-memory view (view.py), one reconcile loop per kind
(jobs.py, schedules.py, on runtime.py) asks the pure rules of lifecycle/ and writes through the Kube client; slots.py
admits, timers.py wakes, leader.py fences, kopfapp.py runs it all in kopf; operator.py is its composition root,
command.py its flags (defaults from settings.py). It may import resources/, lifecycle/, kube/, runner/ (the attempt
pod's environment) and http/ (the server it hosts); nothing imports it but itself and the `sextant` command's
composition root (sextant/__main__.py), and it is the only package that imports kopf."""
