"""Container entrypoints: each reads, decides with core, writes once and reports."""
