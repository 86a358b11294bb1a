"""Activity definitions: the YAML model, its validation, and the sync into the database.

`model` and `validate` (with `cron` and `templates`) are pure; `sync` is the unit of work
and `queries` holds its SQL.
"""
