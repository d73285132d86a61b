"""The wire size the server counts for a QueryColumns reply before it builds one
(permindex.rpc.convert.columns_part_wire_bytes): its keys part is exactly what protobuf writes,
for ASCII, Unicode and long keys, and the whole is an upper bound of the reply's size."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import permindex.v1.index_pb2 as pb
from permindex.index.search.batch_queries import QueryColumns
from permindex.rpc import convert

KEYS = st.lists(
    st.one_of(
        st.text(min_size=1, max_size=40),
        st.text(alphabet="abc/", min_size=100, max_size=300),
        st.text(min_size=30, max_size=200),
    ),
    max_size=60,
)


def part_of(keys: list[str]) -> QueryColumns:
    m = len(keys)
    return QueryColumns(
        np.array([0, m], dtype=np.int64),
        keys,
        np.arange(m, dtype=np.uint64),
        np.zeros(m, dtype=np.uint8),
    )


@settings(max_examples=100, deadline=None)
@given(keys=KEYS)
def test_keys_are_counted_exactly(keys: list[str]) -> None:
    keys = [k for k in keys if not any(0xD800 <= ord(c) <= 0xDFFF for c in k)]
    counted = convert.columns_part_wire_bytes(part_of(keys))
    fixed = convert.COLUMNS_WIRE_BYTES + len(keys) * convert.COLUMN_MATCH_WIRE_BYTES
    assert counted - fixed == pb.QueryColumnsResponse(keys=keys).ByteSize()
    reply = convert.columns_to_proto([(0, part_of(keys))])
    assert reply.ByteSize() <= counted
