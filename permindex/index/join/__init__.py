"""Join: every pair within k of a whole set of fingerprints -- the self-join on table prefixes
(:mod:`.self_join`, compiled in :mod:`.kernels`), pairs of keys streamed in key order
(:mod:`.pair_stream`) and what a collection's near-duplicates give: clusters, flags, exact
duplicates and keep/drop (:mod:`.clusters`)."""
