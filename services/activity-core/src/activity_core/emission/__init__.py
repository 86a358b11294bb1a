"""Emission: one fire of an activity definition becomes ops runs, sink records and audit rows.

`emit.emit_tasks` is the unit of work; `render`, `trigger` and `policy` are pure decisions;
`sink` is the IssueSink adapter; `queries` holds the SQL.
"""
