"""The identity core: pure rules and builders, the Kubernetes gateway, settings and output."""
