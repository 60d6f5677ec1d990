"""The local control plane: Go-built binaries and the harness that runs them."""
