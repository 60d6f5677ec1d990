"""Step lifecycles on the real control plane (DESIGN §4)."""
