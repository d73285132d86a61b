"""Parquet inputs and outputs: Arrow columns as fingerprints and keys (permindex.io.arrow) against
the JSONL rule, and the commands reading and writing Parquet files and datasets."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import StartServer
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs
from serverproc import REPO

import permindex
from permindex.cli import main
from permindex.errors import EXIT_CODES, InvalidArgumentError
from permindex.index.hamming import parse_fingerprint
from permindex.io.arrow import ColumnError, fingerprint_array, key_array, text_array

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _values(seed: int, n: int) -> list[int]:
    """n fingerprints, every fourth with the high bit set, and the extremes."""
    rng = random.Random(seed)
    values = [rng.getrandbits(64) | (1 << 63 if i % 4 == 0 else 0) for i in range(n)]
    return [*values, 0, 1, (1 << 64) - 1, 1 << 63]


def test_fingerprint_column_types_agree() -> None:
    values = _values(1, 500)
    want = np.array(values, dtype=np.uint64)
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
    columns = {
        "uint64": pa.array(values, pa.uint64()),
        "int64": pa.array(signed, pa.int64()),
        "hex16": pa.array([f"{v:016x}" for v in values]),
        "HEX16": pa.array([f"{v:016X}" for v in values], pa.large_string()),
        "0x": pa.array([f"{v:#x}" for v in values]),
        "0X": pa.array([f"0X{v:X}" for v in values]).dictionary_encode(),
        "chunked": pa.chunked_array([pa.array(values[:7], pa.uint64()), values[7:]], pa.uint64()),
        "numpy int64": np.array(signed, dtype=np.int64),
    }
    for name, column in columns.items():
        got = fingerprint_array(column, source="f.parquet", column=name)
        assert got.dtype == np.uint64 and got.shape == (len(values),), name
        assert np.array_equal(got, want), name
    # hex strings read as parse_fingerprint reads them, one by one
    mixed = [f"0x{v:x}" if v % 2 else f"{v:016x}" for v in values]
    got = fingerprint_array(pa.array(mixed), source="f", column="c")
    assert got.tolist() == [parse_fingerprint(s) for s in mixed]


_fingerprint_values = st.integers(min_value=0, max_value=(1 << 64) - 1)
_hex_like = st.one_of(
    st.text(alphabet="0123456789abcdefABCDEFxX -g", max_size=19),
    _fingerprint_values.map(lambda v: f"{v:#x}"),
    _fingerprint_values.map(lambda v: f"{v:016X}"),
    _fingerprint_values.map(lambda v: f"0X{v:x}"),
)


@given(st.lists(_hex_like, max_size=8))
def test_hex_strings_read_exactly_as_parse_fingerprint(strings: list[str]) -> None:
    """The vectorised hex rule against the one rule, value by value: the same fingerprints, or
    a refusal of the first string parse_fingerprint refuses, with its message."""
    expected: list[int] = []
    refused: tuple[int, str] | None = None
    for row, value in enumerate(strings, start=1):
        try:
            expected.append(parse_fingerprint(value))
        except InvalidArgumentError as error:
            refused = (row, str(error))
            break
    column = pa.array(strings, pa.string())
    if refused is None:
        got = fingerprint_array(column, source="f", column="c")
        assert got.dtype == np.uint64 and got.tolist() == expected
    else:
        with pytest.raises(ColumnError) as caught:
            fingerprint_array(column, source="f", column="c")
        assert caught.value.row == refused[0]
        assert str(caught.value) == f"f, column 'c', row {refused[0]}: {refused[1]}"


def test_narrow_integer_columns() -> None:
    for kind in (pa.uint8(), pa.uint16(), pa.uint32(), pa.int8(), pa.int16(), pa.int32()):
        got = fingerprint_array(pa.array([0, 5, 100], kind), source="f", column="c")
        assert got.tolist() == [0, 5, 100]
    with pytest.raises(ColumnError, match=r"f\.parquet, column 'fp', row 3: .*-3 is negative"):
        fingerprint_array(pa.array([1, 2, -3], pa.int32()), source="f.parquet", column="fp")
    empty = fingerprint_array(pa.array([], pa.string()), source="f", column="c")
    assert empty.dtype == np.uint64 and empty.shape == (0,)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([1.0, 2.0]), r"column 'fp': has type double; a fingerprint column is uint64"),
        (pa.array([True]), r"column 'fp': has type bool"),
        (pa.array([b"\x00" * 8]), r"column 'fp': has type binary"),
        (pa.array([1, None], pa.uint64()), r"column 'fp', row 2: null value"),
        (pa.array(["0x1", None]), r"column 'fp', row 2: null value"),
        (pa.array(["000000000000007b", "7b"]), r"row 2: fingerprint '7b' has 2 digits, not 16"),
        (pa.array(["0x" + "f" * 17]), r"row 1: fingerprint '0xf+' has 17 hex digits"),
        (pa.array(["0x"]), r"row 1: fingerprint '0x' is not hex"),
        (pa.array([" 0x1"]), r"row 1: fingerprint ' 0x1' is not hex"),
        (pa.array(["-000000000000001"]), r"row 1: fingerprint '-000000000000001' is not hex"),
    ],
)
def test_bad_fingerprint_columns(column: object, message: str) -> None:
    with pytest.raises(ColumnError, match=message) as caught:
        fingerprint_array(column, source="f.parquet", column="fp", first_row=1)
    assert str(caught.value).startswith("f.parquet, column 'fp'")
    assert isinstance(caught.value, InvalidArgumentError)


def test_first_row_counts_a_batch() -> None:
    with pytest.raises(ColumnError, match=r"row 1002: null") as caught:
        fingerprint_array(pa.array([1, None], pa.int64()), source="s", column="c", first_row=1001)
    assert caught.value.row == 1002 and caught.value.source == "s" and caught.value.column == "c"


def test_key_and_text_columns() -> None:
    keys = ["a", "é", "x" * 1024]
    assert key_array(pa.array(keys), source="f", column="id") == keys
    assert key_array(pa.array(keys, pa.large_string()), source="f", column="id") == keys
    assert key_array(pa.array(keys).dictionary_encode(), source="f", column="id") == keys
    assert text_array(pa.array(["some text", ""]), source="f", column="text") == ["some text", ""]
    bad = [
        (pa.array([17]), r"column 'id': has type int64; a key column holds strings"),
        (pa.array(["a", None]), r"column 'id', row 2: null value"),
        (pa.array(["a", ""]), r"column 'id', row 2: key is empty"),
        (pa.array(["a", "é" * 513]), r"column 'id', row 2: key .* 1026 UTF-8 bytes long"),
        (pa.array([b"a"]), r"column 'id': has type binary"),
    ]
    for column, message in bad:
        with pytest.raises(ColumnError, match=message):
            key_array(column, source="f.parquet", column="id")
    with pytest.raises(ColumnError, match=r"column 'text', row 1: null"):
        text_array(pa.array([None], pa.string()), source="f.parquet", column="text")
    with pytest.raises(ColumnError, match=r"column 'text': has type int64; a text column"):
        text_array(pa.array([1]), source="f.parquet", column="text")


# -- the commands ------------------------------------------------------------------------------


def _signed(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def _fingerprint_column(kind: str, values: list[int]) -> Any:
    """``values`` as a fingerprint column of ``kind``: uint64, int64 (two's complement), hex16
    (16 hex digits) or 0x (0x and 1 to 16 digits)."""
    if kind == "uint64":
        return pa.array(values, pa.uint64())
    if kind == "int64":
        return pa.array([_signed(v) for v in values], pa.int64())
    if kind == "hex16":
        return pa.array([f"{v:016x}" for v in values])
    return pa.array([f"{v:#x}" for v in values])


def _texts(seed: int, n: int) -> list[tuple[str, str]]:
    """n documents of 150 words, every third followed by a copy with one word changed (a
    near-duplicate) and every seventh by an exact copy."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(500)]
    documents: list[tuple[str, str]] = []
    for i in range(n):
        text = [rng.choice(words) for _ in range(150)]
        documents.append((f"doc/{i}", " ".join(text)))
        if i % 3 == 0:
            text[75] = "changed"
            documents.append((f"doc/{i}-near", " ".join(text)))
        if i % 7 == 0:
            documents.append((f"doc/{i}-copy", documents[-1][1]))
    return documents


def _rows(table: Any) -> list[tuple[Any, ...]]:
    """The rows of a pyarrow Table, as tuples."""
    return list(zip(*table.to_pydict().values(), strict=True))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ingest_each_fingerprint_column_type(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_server()
    values = _values(7, 300)
    expected: dict[str, int] = {}
    for kind in ("uint64", "int64", "hex16", "0x"):
        keys = [f"{kind}/{i}" for i in range(len(values))]
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(
            pa.table({"id": keys, "fingerprint": _fingerprint_column(kind, values)}), path
        )
        code, _, err = _run(
            ["ingest", str(path), "--address", server.address, "--no-progress"], capsys
        )
        assert code == 0, err
        assert err.startswith(f"permindex ingest: {len(values)} documents in ")
        expected.update(zip(keys, values, strict=True))
    with permindex.Client(server.address) as client:
        assert dict(client.export()) == expected

    # texts: fingerprinted by the server as the same texts from JSONL are
    documents = _texts(6, 40)
    texts = tmp_path / "texts.parquet"
    pq.write_table(
        pa.table({"id": [k for k, _ in documents], "text": [t for _, t in documents]}), texts
    )
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in documents))
    other = start_server(data_dir=tmp_path / "other")
    for source, address in ((texts, server.address), (jsonl, other.address)):
        code, _, err = _run(["ingest", str(source), "--address", address, "--no-progress"], capsys)
        assert code == 0, err
    with permindex.Client(server.address) as a, permindex.Client(other.address) as b:
        from_parquet = dict(a.export())
        assert {k: from_parquet[k] for k, _ in documents} == dict(b.export())


def test_dedup_of_parquet_texts_and_fingerprints_matches_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = _texts(3, 150)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in documents))
    parquet = tmp_path / "docs.parquet"
    table = pa.table({"id": [k for k, _ in documents], "text": [t for _, t in documents]})
    pq.write_table(table, parquet, row_group_size=100)  # several row groups
    runs = {}
    for options in (["--jobs", "1"], ["--jobs", "2", "--weights", "idf"]):
        for name, source in (("jsonl", jsonl), ("parquet", parquet)):
            out_dir = str(tmp_path / name)
            code, out, err = _run(["dedup", str(source), "--out", out_dir, *options], capsys)
            assert code == 0, err
            runs[name] = out
        assert runs["parquet"] == runs["jsonl"] and runs["parquet"].count("\n") >= 25
        assert "-near\t1\n" in runs["parquet"] or "-near\t2\n" in runs["parquet"]
        # the report's example pairs are read again from the input: the same texts
        report = (tmp_path / "parquet" / "report.html").read_text()
        assert (
            report.count("changed")
            == ((tmp_path / "jsonl" / "report.html").read_text().count("changed"))
            > 0
        )

    # fingerprints: int64 with the high bit set, against brute force
    rng = random.Random(4)
    values = [rng.getrandbits(64) for _ in range(200)]
    values += [v ^ (1 << rng.randrange(64)) ^ (1 << 63) for v in values[:60]]
    keys = [f"k{i:03}" for i in range(len(values))]
    fps = tmp_path / "fps.parquet"
    pq.write_table(pa.table({"id": keys, "fingerprint": _fingerprint_column("int64", values)}), fps)
    code, out, err = _run(["dedup", str(fps), "--out", str(tmp_path / "f"), "--k", "2"], capsys)
    assert code == 0, err
    i, j, d = brute_force_pairs(np.array(values, dtype=np.uint64), 2)
    want = sorted(
        (*sorted((keys[a], keys[b])), int(c))
        for a, b, c in zip(i.tolist(), j.tolist(), d.tolist(), strict=True)
    )
    got = [tuple(line.split("\t")) for line in out.splitlines()]
    assert [(a, b, int(c)) for a, b, c in got] == want and len(want) >= 60


def test_dedup_of_a_parquet_file_of_many_batches_in_worker_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(12)  # 6000 rows: 6 batches of texts, the last two sent to the workers
    words = [f"w{i}" for i in range(50)]
    keys = [f"r{i}" for i in range(6000)]
    texts = [" ".join(rng.choice(words) for _ in range(6)) for _ in keys]
    texts[5999] = texts[0]
    parquet = tmp_path / "many.parquet"
    pq.write_table(pa.table({"id": keys, "text": texts}), parquet)
    jsonl = tmp_path / "many.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in zip(keys, texts, strict=True))
    )
    outs = []
    for source in (parquet, jsonl):
        argv = ["dedup", str(source), "--out", str(tmp_path / source.suffix), "--jobs", "2"]
        code, out, err = _run(argv, capsys)
        assert code == 0 and "6000 documents" in err, err
        outs.append(out)
    assert outs[0] == outs[1] and "r0\tr5999\t0\n" in outs[0]


def test_dedup_writes_the_report_tables_as_parquet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = _texts(5, 60)
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in documents))
    report = tmp_path / "report"
    assert _run(["dedup", str(source), "--out", str(report), "--jobs", "1"], capsys)[0] == 0

    def tsv(name: str) -> list[list[str]]:
        return [line.split("\t") for line in (report / name).read_text().splitlines()]

    pairs = pq.read_table(report / "pairs.parquet")
    assert pairs.schema.names == ["key_a", "key_b", "distance"]
    assert [[a, b, str(c)] for a, b, c in _rows(pairs)] == tsv("pairs.tsv")
    clusters = pq.read_table(report / "clusters.parquet")
    assert [[str(c), k] for c, k in _rows(clusters)] == tsv("clusters.tsv")
    exact = pq.read_table(report / "exact_duplicates.parquet")
    assert exact.schema.field("fingerprint").type == pa.uint64()
    rows = [[str(g), f"{f:016x}", k] for g, f, k in _rows(exact)]
    assert rows == tsv("exact_duplicates.tsv") and rows
    decisions = pq.read_table(report / "keep_drop.parquet")
    assert [[str(r[0]), *r[1:]] for r in _rows(decisions)] == tsv("keep_drop.tsv")


@pytest.mark.parametrize("kind", ["uint64", "int64"])
def test_export_to_parquet_and_import_back(
    kind: str, start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = {f"k{i}": v for i, v in enumerate(_values(11, 2000))}
    stored["é 漢字 🙂"] = 1 << 63
    source = start_server(data_dir=tmp_path / "a")
    with permindex.Client(source.address) as client:
        client.ingest(stored.items())
    out = tmp_path / "export.parquet"
    argv = ["export", "--address", source.address, "--out", str(out), "--fingerprint-type", kind]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert f"{len(stored)} keys written to {out}" in err and not Path(f"{out}.partial").exists()
    table = pq.read_table(out)
    assert table.schema.names == ["id", "fingerprint"]
    assert table.schema.field("id").type == pa.string()
    assert table.schema.field("fingerprint").type == getattr(pa, kind)()
    column = table.column("fingerprint").to_pylist()
    assert column == [(_signed(v) if kind == "int64" else v) for v in stored.values()]
    target = start_server(data_dir=tmp_path / "b")
    code, _, err = _run(["import", str(out), "--address", target.address, "--no-progress"], capsys)
    assert code == 0, err
    with permindex.Client(target.address) as client:
        assert dict(client.export()) == stored


def test_fingerprint_type_is_for_parquet_only(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_server()
    for out in (str(tmp_path / "x.jsonl"), "-"):
        argv = ["export", "--address", server.address, "--out", out, "--fingerprint-type", "int64"]
        code, _, err = _run(argv, capsys)
        assert code == EXIT_CODES["usage"] and "--fingerprint-type is for a Parquet --out" in err


def test_a_dataset_folder_and_renamed_columns(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "dataset"
    (dataset / "day=2").mkdir(parents=True)
    (dataset / "day=1").mkdir()
    parts = {  # read in path order: day=1/a, day=1/b, day=2/a; "same" is last in day=2/a
        "day=2/a.parquet": {"url": ["same", "c0"], "simhash": [3, 4]},
        "day=1/b.parquet": {"url": ["b0", "same"], "simhash": [(1 << 64) - 1, 2]},
        "day=1/a.parquet": {"url": ["a0", "same"], "simhash": [0, 1]},
    }
    for name, columns in parts.items():
        table = pa.table(
            {
                "url": columns["url"],
                "simhash": pa.array(columns["simhash"], pa.uint64()),
                "other": [1.5] * 2,
            }
        )
        pq.write_table(table, dataset / name)
    (dataset / "_SUCCESS").write_text("")  # Spark's marker and checksums are passed over
    (dataset / "day=1" / ".a.parquet.crc").write_bytes(b"\x00crc")
    server = start_server()
    argv = ["ingest", str(dataset), "--address", server.address, "--no-progress"]
    code, _, err = _run([*argv, "--id-field", "url", "--fingerprint-field", "simhash"], capsys)
    assert code == 0, err
    with permindex.Client(server.address) as client:
        assert dict(client.export()) == {"a0": 0, "b0": (1 << 64) - 1, "same": 3, "c0": 4}

    # the default column names are not there: the error names the file and the column
    code, _, err = _run(argv, capsys)
    assert code == EXIT_CODES["invalid"]
    assert f"{dataset / 'day=1' / 'a.parquet'}, column 'id': no such column" in err

    # texts under another name, through dedup
    texts = tmp_path / "texts.parquet"
    documents = _texts(8, 30)
    pq.write_table(
        pa.table({"u": [k for k, _ in documents], "body": [t for _, t in documents]}), texts
    )
    code, out, err = _run(
        [
            "dedup",
            str(texts),
            "--out",
            str(tmp_path / "r"),
            "--id-field",
            "u",
            "--text-field",
            "body",
        ],
        capsys,
    )
    assert code == 0 and "doc/7\tdoc/7-copy\t0\n" in out, err

    # a dataset holding another kind of file is refused, naming it
    (dataset / "day=2" / "notes.txt").write_text("hello")
    code, _, err = _run([*argv, "--id-field", "url", "--fingerprint-field", "simhash"], capsys)
    assert code == EXIT_CODES["invalid"] and "day=2/notes.txt is not one" in err


def _bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(a bad Parquet file, the start of the error it must give after its path)."""
    cases: list[tuple[Path, dict[str, Any], str]] = [
        (
            tmp_path / "nokey.parquet",
            {"key": ["a"], "text": ["x y z"]},
            "column 'id': no such column",
        ),
        (
            tmp_path / "novalue.parquet",
            {"id": ["a"], "body": ["x"]},
            "neither 'text' nor 'fingerprint' columns",
        ),
        (
            tmp_path / "both.parquet",
            {"id": ["a"], "text": ["x"], "fingerprint": [1]},
            "both 'text' and 'fingerprint' columns",
        ),
        (
            tmp_path / "float.parquet",
            {"id": ["a"], "fingerprint": [1.5]},
            "column 'fingerprint': has type double",
        ),
        (tmp_path / "intkey.parquet", {"id": [17], "text": ["x"]}, "column 'id': has type int64"),
        (
            tmp_path / "nullkey.parquet",
            {"id": ["a", None], "text": ["x", "y"]},
            "column 'id', row 2: null value",
        ),
        (
            tmp_path / "nullfp.parquet",
            {"id": ["a", "b", "c"], "fingerprint": pa.array([1, 2, None], pa.uint64())},
            "column 'fingerprint', row 3: null value",
        ),
        (
            tmp_path / "badhex.parquet",
            {"id": ["a", "b"], "fingerprint": ["0x1", "123"]},
            "column 'fingerprint', row 2: fingerprint '123' has 3 digits, not 16, and no 0x",
        ),
        (
            tmp_path / "nulltext.parquet",
            {"id": ["a"], "text": pa.array([None], pa.string())},
            "column 'text', row 1: null value",
        ),
    ]
    made = []
    for path, columns, message in cases:
        pq.write_table(pa.table(columns), path)
        made.append((path, message))
    random_bytes = tmp_path / "random.parquet"
    random_bytes.write_bytes(random.Random(1).randbytes(3000))
    made.append((random_bytes, "not a Parquet file (it does not begin with PAR1)"))
    good = tmp_path / "good.parquet"
    pq.write_table(
        pa.table({"id": ["a"] * 500, "fingerprint": pa.array(range(500), pa.uint64())}), good
    )
    data = good.read_bytes()
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(data[: len(data) // 2])
    made.append((truncated, "not a complete Parquet file (it does not end with PAR1: truncated?)"))
    footer = tmp_path / "footer.parquet"  # the magic bytes right, the footer garbage
    footer.write_bytes(data[:-12] + b"\xff" * 8 + data[-4:])
    made.append((footer, "not a readable Parquet file"))
    pages = tmp_path / "pages.parquet"  # the footer right, the data pages garbage
    pages.write_bytes(data[:4] + b"\x5a" * (len(data) // 3) + data[4 + len(data) // 3 :])
    made.append((pages, "cannot read (corrupt?) columns 'id' and 'fingerprint' near row 1"))
    return made


def test_bad_parquet_files_give_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, message in _bad_files(tmp_path):
        code, out, err = _run(["dedup", str(path), "--out", str(tmp_path / "r")], capsys)
        assert code == EXIT_CODES["invalid"], (path, err)
        assert err.startswith(f"permindex dedup: {path}"), err
        assert message in err, (message, err)
        assert err.count("\n") == 1 and "Traceback" not in err and out == ""


def test_bad_parquet_file_stops_an_ingest_naming_it(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_server()
    path = tmp_path / "late.parquet"
    fingerprints = pa.array([*range(100_000), None], pa.uint64())  # the null in the 2nd batch
    pq.write_table(
        pa.table({"id": [f"k{i}" for i in range(100_001)], "fingerprint": fingerprints}), path
    )
    code, _, err = _run(["ingest", str(path), "--address", server.address, "--no-progress"], capsys)
    assert code == EXIT_CODES["invalid"]
    assert f"{path}, column 'fingerprint', row 100001: null value" in err
    with permindex.Client(server.address) as client:  # the batches before it stay stored
        stored = len(list(client.export()))
    assert 0 < stored <= 100_000 and f"({stored} documents before it were stored)" in err


def _without_pyarrow(*argv: str) -> subprocess.CompletedProcess[str]:
    """``permindex ARGV`` in a process where ``import pyarrow`` fails."""
    shim = (
        "import sys; sys.modules['pyarrow'] = None; sys.argv = ['permindex', *sys.argv[1:]]; "
        "from permindex.cli import entry; entry()"
    )
    return subprocess.run(
        [sys.executable, "-c", shim, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
    )


def test_without_pyarrow(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a"], "text": ["one two three four"]}), path)
    done = _without_pyarrow("dedup", str(path), "--out", str(tmp_path / "r"))
    assert done.returncode == EXIT_CODES["invalid"], done.stderr
    assert done.stderr == (
        "permindex dedup: reading or writing Parquet needs pyarrow: "
        "pip install '.[parquet]' in the permindex clone\n"
    )
    # ingest and export say so before they connect (no server at this address)
    for argv in (
        ["ingest", str(path), "--address", "127.0.0.1:9"],
        ["export", "--out", str(tmp_path / "x.parquet"), "--address", "127.0.0.1:9"],
    ):
        done = _without_pyarrow(*argv)
        assert done.returncode == EXIT_CODES["invalid"], done.stderr
        assert done.stderr == (
            f"permindex {argv[0]}: reading or writing Parquet needs pyarrow: "
            "pip install '.[parquet]' in the permindex clone\n"
        )
    assert not list(tmp_path.glob("x.parquet*"))
    # JSONL still works, and the report has its TSV and JSON files but no Parquet
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in _texts(2, 10)))
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "pairs.parquet").write_bytes(b"from an earlier run")
    done = _without_pyarrow("dedup", str(source), "--out", str(tmp_path / "r"), "--jobs", "1")
    assert done.returncode == 0, done.stderr
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert {"pairs.tsv", "keep_drop.tsv", "summary.json"} <= names
    assert not [n for n in names if n.endswith(".parquet")]  # an earlier run's removed


def test_table_writer_columns_after_rows_in_batches(tmp_path: Path) -> None:
    """ParquetTableWriter.write_columns: rows held by write() come first, then the columns, in
    record batches (row groups) of at most batch_rows; numpy and list columns alike (uint64
    exactly)."""
    from permindex.io.parquet import ParquetTableWriter

    path = tmp_path / "t.parquet"
    big = (1 << 64) - 1
    with ParquetTableWriter(
        path, [("n", "int64"), ("fp", "uint64"), ("key", "string")], batch_rows=3
    ) as writer:
        writer.write([(0, 5, "first")])
        writer.write_columns(
            [np.arange(1, 8), np.array([big, 0, 1, 2, 3, 4, 1 << 63], np.uint64), list("abcdefg")]
        )
        writer.write_columns([[], [], []])
    table = pq.read_table(path)
    assert writer.rows == 8
    assert table.column("n").to_pylist() == list(range(8))
    assert table.column("fp").to_pylist() == [5, big, 0, 1, 2, 3, 4, 1 << 63]
    assert table.column("key").to_pylist() == ["first", *"abcdefg"]
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1, 3, 3, 1]


def test_table_writer_refuses_columns_that_do_not_fit(tmp_path: Path) -> None:
    from permindex.io.parquet import ParquetTableWriter

    with ParquetTableWriter(tmp_path / "t.parquet", [("n", "int64"), ("key", "string")]) as w:
        with pytest.raises(ValueError, match="1 columns given for a file of 2"):
            w.write_columns([[1]])
        with pytest.raises(ValueError, match=r"different lengths: \[1, 2\]"):
            w.write_columns([[1], ["a", "b"]])
        w.write_columns([[1], ["a"]])
    assert pq.read_table(tmp_path / "t.parquet").num_rows == 1
