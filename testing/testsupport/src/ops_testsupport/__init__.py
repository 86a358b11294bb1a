"""What every tree of tests (both services', tests-e2e's) and the bench share: real
PostgreSQL databases and an app's lifespan. The pytest plugin (plugin.py) turns the
databases into fixtures."""
