"""Search: the lookups of an index -- the prefix-range search of each table and the exact check
of every candidate (:mod:`.lookup`, compiled in :mod:`.lookup_kernels`), the batch queries
(:mod:`.batch_queries`) and their results, :class:`~permindex.index.search.matches.Match` lists
(:mod:`.matches`, arranged in :mod:`.match_kernels`)."""
