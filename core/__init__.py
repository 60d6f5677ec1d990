"""The identity core, in two layers: the pure rules, and the shell that calls them.

`rules` holds the decisions and builders over plain dicts; `shell` the Kubernetes gateway,
kubeconfig and settings, output, the clock, and the audit's reads and writes. The shell calls
the rules, never the other way (pyproject.toml's import contracts).
"""
