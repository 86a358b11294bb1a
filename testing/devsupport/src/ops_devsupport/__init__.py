"""Starting and stopping the product's processes for the demo, the end-to-end tests and
the serve tests: a supervisor that leaves nothing behind (processes.py)."""
