"""The pure rules: every decision and builder, over plain dicts, with no I/O, clock or logging.

Given what was read, they return the new object or a refusal; the shell (core.shell) reads,
writes and tells.
"""
