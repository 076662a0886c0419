"""Start-up cost a launcher adds to the first line of a turn."""
