"""Clients: a minimal producer and consumer (the clients issue completes them)."""
