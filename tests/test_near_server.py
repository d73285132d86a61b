"""The Clusters, Flags and ExactDuplicates RPCs on a real server (127.0.0.1, port 0) with a real
client, and the chunking of their answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import numpy as np
import pytest

from permindex.index.join.clusters import NearDuplicates
from permindex.rpc import convert
from permindex.rpc.config import ServerConfig
from permindex.v1 import index_pb2 as pb

if TYPE_CHECKING:
    from conftest import StartServer

    from permindex.v1.index_pb2_grpc import PermIndexStub


def add(stub: PermIndexStub, entries: dict[str, int]) -> None:
    items = list(entries.items())
    for start in range(0, len(items), 50_000):
        stub.Add(
            pb.AddRequest(
                documents=[
                    pb.Document(key=key, fingerprint=fp)
                    for key, fp in items[start : start + 50_000]
                ]
            )
        )


def collection(seed: int, n: int) -> dict[str, int]:
    """n keys: random bases with up to 3 bits flipped, some equal."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 2**64, size=n // 4, dtype=np.uint64).tolist()
    out: dict[str, int] = {}
    for i in range(n):
        fp = bases[int(rng.integers(0, len(bases)))]
        for bit in rng.integers(0, 64, size=int(rng.integers(0, 4))).tolist():
            fp ^= 1 << bit
        out[f"doc/{int(rng.integers(0, 10**6)):06d}-{i}"] = fp
    return out


def clusters_of(stub: PermIndexStub, k: int | None = None) -> list[list[str]]:
    request = pb.ClustersRequest() if k is None else pb.ClustersRequest(k=k)
    parts: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for response in stub.Clusters(request):
        for cluster in response.clusters:
            parts.setdefault(cluster.id, []).extend(cluster.keys)
            sizes[cluster.id] = cluster.size
    assert all(len(parts[i]) == sizes[i] for i in parts)
    return [parts[i] for i in sorted(parts)]


def test_rpcs_agree_with_the_domain_answers(stub: PermIndexStub) -> None:
    entries = collection(1, 600)
    add(stub, entries)
    expected = NearDuplicates(list(entries), list(entries.values()), 3)
    assert clusters_of(stub) == expected.clusters()
    flags = [
        (f.key, f.nearest_key, f.distance, f.neighbors)
        for response in stub.Flags(pb.FlagsRequest())
        for f in response.flags
    ]
    assert flags == [tuple(f) for f in expected.flags()]
    groups = [
        (g.fingerprint, list(g.keys))
        for response in stub.ExactDuplicates(pb.ExactDuplicatesRequest())
        for g in response.groups
    ]
    assert groups == [(g.fingerprint, g.keys) for g in expected.exact_duplicates()]
    assert groups  # the collection has equal fingerprints
    # a smaller k
    smaller = NearDuplicates(list(entries), list(entries.values()), 1)
    assert clusters_of(stub, 1) == smaller.clusters()
    assert clusters_of(stub, 0) == [g.keys for g in expected.exact_duplicates()]


def test_k_above_the_index_is_refused(stub: PermIndexStub) -> None:
    add(stub, {"a": 1, "b": 3})
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Clusters(pb.ClustersRequest(k=4)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "k=4" in (caught.value.details() or "")
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Flags(pb.FlagsRequest(k=9)))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_empty_index_answers_nothing(stub: PermIndexStub) -> None:
    assert list(stub.Clusters(pb.ClustersRequest())) == []
    assert list(stub.Flags(pb.FlagsRequest())) == []
    assert list(stub.ExactDuplicates(pb.ExactDuplicatesRequest())) == []


def test_a_cluster_of_more_than_ten_thousand_keys_arrives_in_parts(stub: PermIndexStub) -> None:
    n = 10_050
    entries = {f"copy/{i:05d}": 5 for i in range(n)}
    far = 0xFFFF_0000_0000_0000
    entries.update({"near/a": 5 ^ 1, "far/b": far, "far/c": far ^ 2})
    add(stub, entries)
    # keys per message: 10,000, or fewer where the message limit needs (a 16 MiB limit holds
    # 8,042 keys of the longest length)
    per = convert.items_per_message(
        ServerConfig.max_message_bytes, convert.KEY_WIRE_BYTES, convert.KEYS_PER_MESSAGE
    )
    responses = list(stub.Clusters(pb.ClustersRequest()))
    assert len(responses) == 2
    assert [sum(len(c.keys) for c in r.clusters) for r in responses] == [per, n + 1 - per + 2]
    first, second = responses[0].clusters[0], responses[1].clusters[0]
    assert (first.id, first.size, second.id, second.size) == (0, n + 1, 0, n + 1)
    assert clusters_of(stub) == [
        sorted([*(k for k in entries if k.startswith(("copy", "near")))]),
        ["far/b", "far/c"],
    ]
    groups = list(stub.ExactDuplicates(pb.ExactDuplicatesRequest()))
    assert sum(len(g.keys) for r in groups for g in r.groups) == n
    flags = [f for r in stub.Flags(pb.FlagsRequest()) for f in r.flags]
    assert len(flags) == n + 3
    assert max(len(r.flags) for r in stub.Flags(pb.FlagsRequest())) == per
    near = next(f for f in flags if f.key == "near/a")
    assert (near.nearest_key, near.distance, near.neighbors) == ("copy/00000", 1, n)


def test_chunking_of_groups() -> None:
    groups = [["a", "b", "c", "d", "e"], ["f", "g"], ["h", "i"]]
    messages = list(convert.clusters_to_proto(groups, chunk=3))
    shape = [[(c.id, c.size, list(c.keys)) for c in m.clusters] for m in messages]
    assert shape == [
        [(0, 5, ["a", "b", "c"])],
        [(0, 5, ["d", "e"]), (1, 2, ["f"])],
        [(1, 2, ["g"]), (2, 2, ["h", "i"])],
    ]
    assert list(convert.clusters_to_proto([])) == []
    exact = list(convert.exact_groups_to_proto([(9, ["x", "y", "z"])], chunk=2))
    assert [(g.id, g.fingerprint, g.size, list(g.keys)) for m in exact for g in m.groups] == [
        (0, 9, 3, ["x", "y"]),
        (0, 9, 3, ["z"]),
    ]
    flags = list(convert.flags_to_proto([("a", "b", 1, 1)] * 5, chunk=2))
    assert [len(m.flags) for m in flags] == [2, 2, 1]


# --- min_words ---------------------------------------------------------------------------------


def test_server_min_words_reports_short_texts_and_indexes_the_rest(
    start_server: StartServer,
) -> None:
    from conftest import make_stub

    server = start_server(min_words=20)
    channel, stub = make_stub(server.address)
    try:
        nineteen = " ".join(f"w{i}" for i in range(19))
        twenty = nineteen + " w19"
        response = stub.Add(
            pb.AddRequest(
                documents=[
                    pb.Document(key="short", text=nineteen),
                    pb.Document(key="long", text=twenty),
                    pb.Document(key="given", fingerprint=7),  # a fingerprint has no words
                ]
            )
        )
        statuses = [r.status for r in response.results]
        assert statuses == [
            pb.DOCUMENT_STATUS_TOO_SHORT,
            pb.DOCUMENT_STATUS_ADDED,
            pb.DOCUMENT_STATUS_ADDED,
        ]
        assert (response.added, response.too_short) == (2, 1)
        checked = stub.CheckAndAdd(
            pb.CheckAndAddRequest(documents=[pb.Document(key="short2", text=nineteen + " x")])
        )
        assert checked.results[0].status == pb.DOCUMENT_STATUS_ADDED
        checked = stub.CheckAndAdd(
            pb.CheckAndAddRequest(documents=[pb.Document(key="short3", text="a b c d")])
        )
        assert checked.results[0].status == pb.DOCUMENT_STATUS_TOO_SHORT
        found = stub.Get(pb.GetRequest(keys=["short", "long", "short3"])).results
        assert [r.found for r in found] == [False, True, False]
    finally:
        channel.close()
