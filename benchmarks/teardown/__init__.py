"""Teardown latency: client close → the container's process group reaped."""
