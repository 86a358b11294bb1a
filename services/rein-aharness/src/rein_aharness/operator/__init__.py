"""Operator controls: `rein-aharness close-outbox status|replay`."""
