"""Step lifecycles on the real control plane (docs/design.md §4)."""
