"""Tables (Manku, Jain & Das Sarma 2007, section 3): the table designs and their permutations
(:mod:`.permutation`) and one table -- its fingerprints ordered by permuted prefix, in sorted runs
with a prefix directory and a memtable (:mod:`.table`). Every table of an index, kept in step
with its rows, is :class:`permindex.index.table_set.TableSet`."""
