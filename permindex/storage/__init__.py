"""Durability: the data directory, the snapshot format, the write-ahead log and the durable store.

- :mod:`permindex.storage.snapshot`: the data directory (lock, layout, fsync) and snapshot files.
- :mod:`permindex.storage.wal`: the write-ahead log (record format, fsync policies, recovery).
- :mod:`permindex.storage.store`: an :class:`~permindex.index.Index` kept in a data directory.

Imports only :mod:`permindex.errors` and :mod:`permindex.index`; no grpc.
"""
