"""activity-core: definitions, emission and the ops_runs claim queue."""
