"""`python -m tests.up`: the local cluster for a person, with the product on it."""
