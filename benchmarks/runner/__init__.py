"""End-to-end runner benchmarks: throughput, concurrent streams, memory per stream."""
