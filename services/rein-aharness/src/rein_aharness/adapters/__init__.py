"""Adapters to peers: Activity Core's queue API over HTTP."""
