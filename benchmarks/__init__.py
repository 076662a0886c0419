"""Benchmark harnesses for sandstream (run each as ``python -m benchmarks.<name>.run``)."""
