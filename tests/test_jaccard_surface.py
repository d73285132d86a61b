"""What a user of a Jaccard collection (method minhash) sees through the public surface, where
it differs from a SimHash collection's: the kind of a sketch in hex travels with it
(Document.sketch_kind, ExportEntry.sketch_kind, GetResult.sketch_kind) and is checked against
the collection; MinHashSketch refuses values that would wrap; `get`, `stats`, `collections
list` and `export` print what is meaningful for such a collection. Real servers on 127.0.0.1,
the CLI in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import grpc
import numpy as np
import pytest
from conftest import make_stub

import permindex
from permindex.cli import main
from permindex.client import SketchHex
from permindex.errors import EXIT_CODES, InvalidArgumentError, LimitExceededError
from permindex.rpc.server import RunningServer
from permindex.v1 import index_pb2 as pb

#: 10 words: 8 distinct word 3-shingles, whose 16-hex-digit hashes make as many hex digits
#: (128) as a 16-permutation signature's 8-digit values: the hex alone cannot tell them apart.
EIGHT_SHINGLES = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
OTHER = "one two three four five six seven eight nine ten eleven twelve"


def sketches(collection: permindex.Client) -> dict[str, SketchHex]:
    """Each stored key of a Jaccard collection with its sketch (``iter_export``)."""
    return {key: cast(SketchHex, sketch) for key, sketch in collection.iter_export()}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``permindex ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_kind_of_a_sketch_in_hex_travels_with_it_and_is_checked(
    server: RunningServer,
) -> None:
    with permindex.Client(server.address) as client:
        client.create_collection("ex", method="minhash", threshold=0.5)
        client.create_collection("sg", method="minhash", threshold=0.5, verify="signature",
                                 permutations=16)  # fmt: skip
        client.create_collection("sg2", method="minhash", threshold=0.5, verify="signature",
                                 permutations=16)  # fmt: skip
        ex, sg, sg2 = client.use("ex"), client.use("sg"), client.use("sg2")
        ex.add([("eight", EIGHT_SHINGLES), ("other", OTHER)])
        sg.add([("eight", EIGHT_SHINGLES), ("other", OTHER)])
        exported = sketches(ex)
        eight = exported["eight"]
        assert eight == SketchHex(eight.hex, "shingle_hashes") and len(eight.hex) == 8 * 16
        assert sketches(sg)["eight"].kind == "signature"

        # The exact export sent back to a signature collection of 16 permutations: read as
        # shingle hashes (the kind says so) and signed there, exactly as the text is.
        sg2.add(list(exported.items()))
        assert dict(sg2.iter_export()) == dict(sg.iter_export())
        assert sg2.pairs() == sg.pairs()
        # and each kind back into a collection of its own: the same sketches
        client.create_collection("ex2", method="minhash", threshold=0.5)
        client.use("ex2").ingest(ex.iter_export(with_times=True))
        assert sorted(client.use("ex2").iter_export()) == sorted(ex.iter_export())

        # Get answers the stored sketch and its kind (never a fingerprint 0)
        assert ex.get("eight") == eight and ex.get("nope") is None
        assert sg.get_many(["eight", "nope"]) == [sketches(sg)["eight"], None]
        client.add([("simhash", 7)])
        assert client.get("simhash") == 7  # a SimHash collection: the fingerprint, as before

        channel, stub = make_stub(server.address)
        try:
            entries = [e for m in stub.Export(pb.ExportRequest(collection="ex")) for e in m.entries]
            assert {e.sketch_kind for e in entries} == {pb.SKETCH_KIND_SHINGLE_HASHES}
            (got,) = stub.Get(pb.GetRequest(collection="ex", keys=["eight"])).results
            assert (got.found, got.HasField("fingerprint")) == (True, False)
            assert (got.sketch_hex, got.sketch_kind) == (eight.hex, pb.SKETCH_KIND_SHINGLE_HASHES)

            # Without a kind (a client older than the field) the hex is read as the
            # collection's own kind: these 128 digits as a signature, not what the text gives.
            stub.Add(pb.AddRequest(collection="sg2", documents=[
                pb.Document(key="legacy", sketch_hex=eight.hex)
            ]))  # fmt: skip
            assert sg2.get("legacy") == SketchHex(eight.hex, "signature") != sg.get("eight")

            # A signature sent to an exact collection: refused, naming the document, saying
            # what the collection takes; nothing of the request applied.
            signature = sketches(sg)["other"]
            reversed_hashes = "".join(
                eight.hex[i : i + 16] for i in range(len(eight.hex) - 16, -1, -16)
            )
            before = sorted(ex.iter_export())
            for bad, why in (
                (pb.Document(key="x", sketch_hex=signature.hex,
                             sketch_kind=pb.SKETCH_KIND_SIGNATURE), "takes shingle hashes"),
                (pb.Document(key="x", sketch_hex=eight.hex, sketch_kind=7),  # type: ignore[arg-type]
                 "not a SketchKind"),
                (pb.Document(key="x", sketch_hex=reversed_hashes,
                             sketch_kind=pb.SKETCH_KIND_SHINGLE_HASHES), "increasing order"),
            ):  # fmt: skip
                for rpc, request in (
                    (stub.Add, pb.AddRequest(collection="ex", documents=[
                        pb.Document(key="fine", text=OTHER), bad
                    ])),
                    (stub.CheckAndAdd, pb.CheckAndAddRequest(collection="ex", documents=[
                        pb.Document(key="fine", text=OTHER), bad
                    ])),
                ):  # fmt: skip
                    with pytest.raises(grpc.RpcError) as refused:
                        rpc(request)
                    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    details = refused.value.details() or ""
                    assert "documents[1]" in details and why in details, details
            assert sorted(ex.iter_export()) == before
        finally:
            channel.close()

        # the Python client sends the kind it was given, and refuses one it does not know
        with pytest.raises(InvalidArgumentError, match="kind 'hashes'"):
            ex.add([("x", SketchHex(eight.hex, "hashes"))])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="takes shingle hashes"):
            ex.add([("x", signature)])
        assert sorted(ex.iter_export()) == before


@pytest.mark.parametrize(
    ("hashes", "signature", "error", "match"),
    [
        ([-1], [], ValueError, r"shingle_hashes\[0\] = -1 is outside \[0, 2\^64\)"),
        ([1, 2**64], [], ValueError, r"shingle_hashes\[1\] = 18446744073709551616 is outside"),
        ([1.0], [], TypeError, r"shingle_hashes\[0\] is float 1.0; give ints"),
        ([True], [], TypeError, r"shingle_hashes\[0\] is bool"),
        ("0102", [], TypeError, "shingle_hashes is str"),
        (None, [], TypeError, "shingle_hashes is NoneType"),
        (np.array([3, -5]), [], ValueError, r"shingle_hashes\[1\] = -5"),
        (np.array([0.5]), [], TypeError, "dtype float64"),
        (np.zeros((2, 2), dtype=np.uint64), [], ValueError, r"shape \(2, 2\)"),
        ([], [2**32], ValueError, r"signature\[0\] = 4294967296 is outside \[0, 2\^32\)"),
        ([], [-1], ValueError, r"signature\[0\] = -1"),
        ([], np.array([2**40], dtype=np.uint64), ValueError, r"signature\[0\] = 1099511627776"),
        ([], [7.5], TypeError, r"signature\[0\] is float"),
    ],
)
def test_minhash_sketch_refuses_values_that_would_wrap(
    hashes: object, signature: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        permindex.MinHashSketch(hashes, signature)  # type: ignore[arg-type]


def test_minhash_sketch_keeps_every_value_in_range() -> None:
    top = permindex.MinHashSketch([0, 2**64 - 1, 5], [0, 2**32 - 1])
    assert top.shingle_hashes.dtype == np.uint64 and top.signature.dtype == np.uint32
    assert top.shingle_hashes.tolist() == [0, 2**64 - 1, 5]
    assert top.signature.tolist() == [0, 2**32 - 1]
    signed = permindex.MinHashSketch(np.array([1, 2], dtype=np.int64), np.array([3], np.int8))
    assert signed.shingle_hashes.tolist() == [1, 2] and signed.signature.tolist() == [3]
    hashes = np.array([9, 4], dtype=np.uint64)
    assert permindex.MinHashSketch(hashes, []).shingle_hashes is hashes  # no copy
    sketch = permindex.minhash_sketch("one two three four five", permutations=8)
    assert sketch is not None and permindex.MinHashSketch(*sketch) == sketch
    # a client never sends a wrapped value: the sketch cannot be made
    with pytest.raises(ValueError, match="outside"):
        permindex.MinHashSketch(np.array([-1], dtype=np.int64), [])


def test_the_cli_shows_a_jaccard_collection_as_it_is(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = ("--address", server.address)
    with permindex.Client(server.address) as client:
        client.create_collection("one", method="minhash", threshold=1.0)
        client.create_collection("odd", method="minhash", threshold=0.123456789,
                                 verify="signature", permutations=16)  # fmt: skip
        client.use("one").add([("eight", EIGHT_SHINGLES)])
        client.use("odd").add([("eight", EIGHT_SHINGLES), ("other", OTHER)])
        one_sketch = client.use("one").get("eight")
        odd_sketch = client.use("odd").get("eight")
    assert isinstance(one_sketch, SketchHex) and isinstance(odd_sketch, SketchHex)

    # collections list and describe print a threshold alike (1.0, all its digits)
    code, listed, _ = run(capsys, "collections", "list", *at)
    assert code == 0
    assert "one\t1\tminhash\t1.0\t128\t1x128\texact\n" in listed
    assert "\tminhash\t0.123456789\t16\t" in listed
    for name, shown in (("one", "1.0"), ("odd", "0.123456789")):
        described = run(capsys, "collections", "describe", name, *at)[1]
        assert f"threshold\t{shown}\n" in described
        as_json = json.loads(run(capsys, "collections", "describe", name, "--json", *at)[1])
        assert repr(as_json["threshold"]) == shown

    # get: the kind and size of the stored sketch; JSON with the sketch as export writes it
    code, out, _ = run(capsys, "get", "eight", "--collection", "one", *at)
    assert (code, out) == (0, "eight\tshingle_hashes\t8\n")
    code, out, _ = run(capsys, "get", "eight", "other", "--collection", "odd", *at)
    assert (code, out) == (0, "eight\tsignature\t16\nother\tsignature\t16\n")
    code, out, err = run(capsys, "get", "eight", "nope", "--collection", "one", "--json", *at)
    assert code == EXIT_CODES["not_found"] and "nope" in err
    assert json.loads(out) == [
        {"key": "eight", "kind": "shingle_hashes", "size": 8, "sketch": one_sketch.hex}
    ]
    exported = run(capsys, "export", "--collection", "one", *at)[1]
    assert json.loads(exported) == {"id": "eight", "shingle_hashes": one_sketch.hex}
    code, out, _ = run(capsys, "get", "eight", "--json", "--collection", "odd", *at)
    assert json.loads(out)[0]["sketch"] == odd_sketch.hex and len(odd_sketch.hex) == 16 * 8
    with permindex.Client(server.address) as client:
        client.add([("simhash", 255)])
    code, out, _ = run(capsys, "get", "simhash", *at)
    assert (code, out) == (0, "simhash\t00000000000000ff\n")
    code, out, _ = run(capsys, "get", "simhash", "--json", *at)
    assert json.loads(out) == [{"key": "simhash", "fingerprint": "00000000000000ff"}]

    # stats: no SimHash design (0 blocks, k = 0) nor memory parts, the collection's own shape
    code, out, _ = run(capsys, "stats", "--collection", "odd", *at)
    assert code == 0 and "design" not in out and "memory.fingerprints" not in out
    assert "method\tminhash\n" in out
    shape = json.loads(run(capsys, "collections", "describe", "odd", "--json", *at)[1])
    bands, rows = shape["bands"], shape["rows"]
    assert bands * rows <= 16
    assert (
        f"jaccard\tthreshold 0.123456789, 16 permutations, {bands}x{rows} bands x rows, "
        "verify signature\n"
    ) in out
    stats = json.loads(run(capsys, "stats", "--collection", "odd", "--json", *at)[1])
    assert "design" not in stats and "memory_breakdown" not in stats
    assert stats["method"] == "minhash" and stats["count"] == 2
    assert stats["jaccard"] == {
        "threshold": 0.123456789, "permutations": 16, "bands": bands, "rows": rows,
        "verify": "signature",
    }  # fmt: skip
    assert "design\t4 blocks, 1 leading, 4 tables, k = 3\n" in run(capsys, "stats", *at)[1]

    # --k is refused by pairs, clusters and flags alike (exit 2), before anything is asked
    for command in ("pairs", "clusters", "flags"):
        code, _, err = run(capsys, command, "--k", "3", "--collection", "odd", *at)
        assert code == EXIT_CODES["usage"] and "--k is a SimHash option" in err, (command, err)
    # clusters --exact: identical sketches grouped under their digest, as documented
    with permindex.Client(server.address) as client:
        client.use("odd").add([("eight again", EIGHT_SHINGLES)])
        (group,) = client.use("odd").exact_duplicates()
    code, out, _ = run(capsys, "clusters", "--exact", "--collection", "odd", *at)
    digest = f"{group.fingerprint:016x}"
    assert (code, out) == (0, f"1\t{digest}\teight\n1\t{digest}\teight again\n")

    # export: --fingerprint-type (either value) has no meaning for a Jaccard collection
    for value in ("uint64", "int64"):
        target = tmp_path / f"{value}.parquet"
        argv = ("export", "--collection", "one", *at, "--out", str(target))
        code, _, err = run(capsys, *argv, "--fingerprint-type", value)
        assert code == EXIT_CODES["usage"], err
        assert f"--fingerprint-type {value} is for a SimHash collection" in err
        assert "leave --fingerprint-type out" in err
        assert not list(tmp_path.glob(f"{value}.parquet*"))
    code, _, err = run(capsys, "export", "--collection", "one", *at, "--fingerprint-type",
                       "uint64")  # fmt: skip
    assert code == EXIT_CODES["usage"] and "is for a Parquet --out" in err


def test_the_cli_import_sends_the_kind(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exact export of permutations / 2 shingle hashes, imported by the CLI into a signature
    collection: signed from the hashes, as the text is (JSONL and Parquet)."""
    at = ("--address", server.address)
    options = {"method": "minhash", "threshold": 0.5, "verify": "signature", "permutations": 16}
    with permindex.Client(server.address) as client:
        client.create_collection("ex", method="minhash", threshold=0.5)
        client.use("ex").add([("eight", EIGHT_SHINGLES), ("other", OTHER)])
        client.create_collection("texts", **options)  # type: ignore[arg-type]
        client.use("texts").add([("eight", EIGHT_SHINGLES), ("other", OTHER)])
        expected = sorted(client.use("texts").iter_export())
        outs = [tmp_path / "ex.jsonl"]
        try:
            import pyarrow  # noqa: F401

            outs.append(tmp_path / "ex.parquet")
        except ImportError:
            pass
        for n, out in enumerate(outs):
            assert run(capsys, "export", "--collection", "ex", *at, "--out", str(out))[0] == 0
            client.create_collection(f"sg{n}", **options)  # type: ignore[arg-type]
            code, _, err = run(capsys, "import", str(out), "--collection", f"sg{n}", *at)
            assert code == 0, err
            assert sorted(client.use(f"sg{n}").iter_export()) == expected


def test_a_get_whose_sketches_do_not_fit_one_message_is_refused(start_server: Any) -> None:
    """Get carries each stored sketch: more than one message holds is RESOURCE_EXHAUSTED
    (the server's reply limit, saying what to do), and fewer keys per request get every
    sketch."""
    server = start_server(max_message_bytes=1 << 20)
    text = " ".join(f"w{i}" for i in range(4002))  # 4,000 shingles: 64,000 hex digits
    keys = [f"page{i}" for i in range(20)]
    with permindex.Client(server.address) as client:
        client.create_collection("long", method="minhash")
        pages = client.use("long")
        pages.add([(key, text) for key in keys])
        with pytest.raises(LimitExceededError, match="over the server's message limit"):
            pages.get_many(keys)
    with permindex.Client(server.address, batch_size=10) as client:
        found = client.use("long").get_many(keys)
        assert [len(cast(SketchHex, s).hex) for s in found] == [64_000] * 20
