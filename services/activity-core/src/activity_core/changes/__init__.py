"""A run's changes bundle (docs/changes.md): its format, its checks, its storage.

`bundle_format` reads a bundle's header (pure); `scratch_git` runs git in a scratch
repository of our own (no hooks, no config but ours, bounded); `verify` checks a bundle
against the run's grant; `anchors` names a file's diff on the run page; `queries` holds
the SQL of `ops_run_changes`.
"""
