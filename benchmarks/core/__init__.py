"""Line throughput of the sans-IO core: the façade against baselines and a decode ceiling.

Run ``.venv/bin/python -m benchmarks.core.run --help``.
"""
