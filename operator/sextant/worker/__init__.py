"""`sextant worker`: a long-running process that serves queues and runs handlers as jobs are assigned to it, with
no pod per attempt (docs/workers.md is the protocol).

    plan.py          which queues and handlers it serves (the Handler objects and the --module functions)
    registration.py  its Lease: created at start, renewed every leaseDuration/3, draining, deleted at exit
    assignments.py   which jobs are its own: one watch with fieldSelector=status.worker=NAME
    execution.py     running one attempt: SDK functions on the loop or in threads, commands as subprocesses
    results.py       the attempt's end, recorded by the lifecycle's own rules at the version read
    service.py       the worker: the above together, stops (cancel, timeout, lease loss) and the drain
    settings.py      what it is told (the flags' defaults)
    main.py          the CLI
"""
