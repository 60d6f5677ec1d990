"""The release tooling: dist/'s bundles and charts/dispatch-k8s, rendered from config/'s overlays.

`scripts/render-dist` runs it, and the tests read what it renders. It is not shipped and imports
nothing of tests/ (an import contract): the kustomize it runs is a path its caller gives, which
scripts/render-dist and the tests take from the harness's builder (tests/cluster/binaries.py).
"""
