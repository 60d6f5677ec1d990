"""Tests, mirroring the layout: unit, cluster (harness), integration, images, pipelines."""
