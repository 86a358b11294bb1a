"""The ops_runs claim queue: SQL, pure close decisions, and the unit-of-work service."""
