"""The chat database, every table and its SQL: the store's contract (:mod:`.contract`),
its one implementation (:mod:`.sql`, a module per concern) on SQLite or PostgreSQL
through what its SQL needs of a database (:mod:`.database`), versioned migrations
(:mod:`.migrations`), the log mover's tables (:mod:`.moved_runs`, :mod:`.leases`) and
the bag's blobs (:mod:`.bag`). The store imports no mover."""

__all__: list[str] = []
