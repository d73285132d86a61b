"""Keys: the key rule (:mod:`.rule`), the input batches of bulk writes (:mod:`.batches`), and
the key store (:mod:`.store`) -- each key's canonical code (:mod:`.codec`), every row's code
(:mod:`.rows`), the key -> live row hash table (:mod:`.hash_table`), their compiled kernels
(:mod:`.kernels`) and their growth outside the index's lock (:mod:`.growth`); also
:mod:`.column`, many keys as two numpy arrays for an offline ``dedup``."""
