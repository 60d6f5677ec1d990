"""The imperative shell the steps and the controller share.

The step runner, settings, the audit's reads and its one write, the gateway (the one package
that imports `kubernetes`), the clock, and the words a setting can take that they share.
"""
