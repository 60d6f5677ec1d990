"""The imperative shell the steps and the controller share.

The gateway (the one package that imports `kubernetes`), settings, output, the clock, and the
audit's reads and its one write.
"""
