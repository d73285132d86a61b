"""Durability: the data directory, the snapshot format, the write-ahead log and the durable store.

- :mod:`permindex.storage.datadir`: the data directory's layout and lock, fsync and retiring files.
- :mod:`permindex.storage.snapshot`: the snapshot format, and a data directory's generations.
- :mod:`permindex.storage.wal_records`: the write-ahead log's segment and record format.
- :mod:`permindex.storage.wal_recovery`: reading the log back at a start (torn tails, damage).
- :mod:`permindex.storage.wal`: the log writer and its fsync policies.
- :mod:`permindex.storage.durable`: the one driver of a durable collection (write lock, log,
  snapshots, recovery), whatever its method.
- :mod:`permindex.storage.store`: an :class:`~permindex.index.Index` kept in a data directory.
- :mod:`permindex.storage.jaccard_store`: a Jaccard collection kept in a data directory.

Imports only :mod:`permindex.errors` and :mod:`permindex.index`; no grpc.
"""
