"""The documentation pages generated from the code, and the tests that keep them so."""
