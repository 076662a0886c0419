"""What the model gateway adds to a model call: time to first byte, throughput."""
