"""Translators from other agents' output into the envelope: :mod:`.claude_code`."""

__all__: list[str] = []
