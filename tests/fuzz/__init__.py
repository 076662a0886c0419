"""Fuzz harnesses for the core, run by hand for hours (see docs/fuzzing.md)."""
