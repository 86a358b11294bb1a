"""Emission: one fire of an activity definition becomes ops runs, audit rows and sink records.

`emit.emit_tasks` writes the ops runs and audit rows (one transaction), `publish.
publish_pending` then the IssueSink writes they owe: the two units of work. `render`,
`trigger` and `policy` are pure decisions; `sink` is the IssueSink adapter; `queries`
holds the SQL.
"""
