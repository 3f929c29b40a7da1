"""Benchmarks of relaycc against plain numpy; `python -m bench` runs them."""
