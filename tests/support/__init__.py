"""What several suites share and no product code needs."""
