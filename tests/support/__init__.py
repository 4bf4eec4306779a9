"""Helpers several test packages share (free ports, polling until a condition holds)."""
