"""The demo: the README's main job on the local cluster (`python -m tests.demo`)."""
