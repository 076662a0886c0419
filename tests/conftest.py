"""Test-wide settings: hypothesis without deadlines (CI machines are shared and slow)."""

from hypothesis import settings

settings.register_profile("sandstream", deadline=None)
settings.load_profile("sandstream")
