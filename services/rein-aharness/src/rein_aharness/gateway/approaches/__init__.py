"""The local approaches: `command` and `brief`."""
