"""The chat database: the store's contract (:mod:`.contract`), its SQLite backend
(:mod:`.sqlite`), versioned migrations (:mod:`.migrations`) and the bag's blobs
(:mod:`.bag`)."""

__all__: list[str] = []
