"""What a benchmark ran on: every benchmark's figures begin with it."""

from __future__ import annotations

import os


def machine_line() -> str:
    """What a benchmark ran on, first line of its figures: the cores and how busy they were."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {os.cpu_count()} cores, load average {load} at the start"
