"""Benchmark harnesses for sandstream (each from the checkout:
``.venv/bin/python -m benchmarks.<name>.run``)."""
