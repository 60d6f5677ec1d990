"""The checkpoint benchmark's own code (tests/storage/bench.py) at its smallest, on the suite's
SeaweedFS: not its figures, which a test never judges, but that each side of a row sends what
it says (DCP's own writer, unfenced, against the same save through the library) and that the
requests are told apart by row and side."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.storage import bench

pytestmark = [pytest.mark.storage, pytest.mark.usefixtures("torch_installed")]


def test_each_side_of_a_row_counts_its_own_requests(s3_endpoint: str, tmp_path: Path) -> None:
    rows = {
        (row.what, row.store): row
        for row in bench.bench(s3_endpoint, tmp_path, size=2**16, tensors=2, rounds=1)
    }
    assert all(len(r.unfenced.seconds) == len(r.fenced.seconds) == 1 for r in rows.values())
    plain = rows["plain save", "S3"]
    assert plain.unfenced.sent == Counter(PUT=2)
    # The head's read before writing and its swap (If-Match).
    assert plain.fenced.sent == Counter(GET=1, PUT=3)
    dcp = rows["DCP save", "S3"]
    # DCP's own: a HEAD of .metadata as it plans, its one data file, .metadata.tmp, then the
    # rename to .metadata: a HEAD, and a GET, a PUT and a DELETE through the object mapping.
    assert dcp.unfenced.sent == Counter(HEAD=2, GET=1, PUT=3, DELETE=1)
    # The head read as the coordinator plans (the fence), and swapped on that read at the
    # commit: two more than DCP's own, the bound.
    assert dcp.fenced.sent - dcp.unfenced.sent == Counter(GET=1, PUT=1)
    assert dcp.line().endswith(
        "| 7: GET 1, PUT 3, HEAD 2, DELETE 1 | 9: GET 2, PUT 4, HEAD 2, DELETE 1 |"
    )
    load = rows["DCP load", "S3"]
    assert load.unfenced.sent == Counter(GET=2)  # .metadata and the data file
    assert load.fenced.sent == Counter(GET=3)  # and the head, for latest()
