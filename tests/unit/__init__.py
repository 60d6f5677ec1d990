"""Unit tests: pure functions over plain dicts, no cluster."""
