"""The warm pool: time to a turn's first line on a warm sandbox against a cold one."""
