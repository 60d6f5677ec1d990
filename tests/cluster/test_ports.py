"""The ports the harness chooses (tests/cluster/process.py): lanes side by side each choose from
a share of their own, so two control planes started in the same second never clash."""

from __future__ import annotations

from itertools import pairwise

import pytest

from tests.cluster.process import LOWEST_PORT, PORTS_ENV, free_ports, port_range, port_shares


def test_the_lanes_shares_are_disjoint_and_within_the_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PORTS_ENV, raising=False)
    low, high = port_range()
    assert low == LOWEST_PORT
    shares = [tuple(map(int, share.split("-"))) for share in port_shares(4)]
    assert shares[0][0] == low
    assert shares[-1][1] <= high
    assert all(a_high <= b_low for (_, a_high), (b_low, _) in pairwise(shares))
    assert all(share_high - share_low >= 1000 for share_low, share_high in shares)


def test_a_run_chooses_only_from_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORTS_ENV, raising=False)
    share = port_shares(4)[2]
    monkeypatch.setenv(PORTS_ENV, share)
    low, _, high = share.partition("-")
    chosen = free_ports(200)
    assert len(set(chosen)) == 200
    assert all(int(low) <= port < int(high) for port in chosen), share
