"""PairsResponse bytes built with numpy (permindex.rpc.wire.PairEncoder) against protobuf's own
encoding of the same message: byte for byte, for keys of every UTF-8 width and of lengths on both
sides of each varint boundary (127/128 bytes, 1,024), distances 0..64, chunks of 0 to the
encoder's most."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import SETTINGS

from permindex.index.keys.rule import MAX_KEY_BYTES
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
