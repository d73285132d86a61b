"""Wire bytes the server counts or builds itself, against protobuf's own: PairsResponse bytes
built with numpy (permindex.rpc.wire.PairEncoder) byte for byte, for keys of every UTF-8 width
and of lengths on both sides of each varint boundary (127/128 bytes, 1,024), distances 0..64,
chunks of 0 to the encoder's most; and the size of a QueryColumns reply counted before it is
built (permindex.rpc.convert.columns_part_wire_bytes), exact for its keys part."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SETTINGS

from permindex.index.keys.rule import MAX_KEY_BYTES
from permindex.index.search.batch_queries import QueryColumns
from permindex.rpc import convert
from permindex.rpc.wire import PairEncoder
from permindex.v1 import index_pb2 as pb

_KEYS = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=40),
        st.integers(1, MAX_KEY_BYTES).map(lambda n: "k" * n),
        st.sampled_from(["é" * 64, "x" * 127, "x" * 128, "€" * 43, "😀" * 256]),
    ),
    min_size=1,
    max_size=30,
    unique=True,
)


def _expected(keys: list[str], a: list[int], b: list[int], d: list[int]) -> bytes:
    message = pb.PairsResponse(
        pairs=[
            pb.Pair(key_a=keys[x], key_b=keys[y], distance=z)
            for x, y, z in zip(a, b, d, strict=True)
        ]
    )
    return message.SerializeToString()


@SETTINGS
@given(keys=_KEYS, data=st.data())
def test_encoded_pairs_equal_protobufs_encoding(keys: list[str], data: st.DataObject) -> None:
    encoder = PairEncoder(keys, 50)
    for _ in range(3):  # the encoder's scratch area is reused between chunks
        m = data.draw(st.integers(0, 50))
        index = st.integers(0, len(keys) - 1)
        a = data.draw(st.lists(index, min_size=m, max_size=m))
        b = data.draw(st.lists(index, min_size=m, max_size=m))
        d = data.draw(st.lists(st.integers(0, 64), min_size=m, max_size=m))
        got = encoder.encode(
            np.array(a, dtype=np.int64), np.array(b, dtype=np.int64), np.array(d, dtype=np.int64)
        )
        assert got == _expected(keys, a, b, d)
        assert (
            pb.PairsResponse.FromString(got).pairs[:1]
            == pb.PairsResponse.FromString(_expected(keys, a, b, d)).pairs[:1]
        )


def test_more_pairs_than_the_encoder_takes_is_an_error() -> None:
    encoder = PairEncoder(["a", "b"], 2)
    zeros = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="3 pairs in one message; this encoder takes 2"):
        encoder.encode(zeros, zeros, zeros)


# The wire size the server counts for a QueryColumns reply before it builds one
# (permindex.rpc.convert.columns_part_wire_bytes): its keys part is exactly what protobuf writes,
# for ASCII, Unicode and long keys, and the whole is an upper bound of the reply's size.


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
