"""Regenerate permindex/v1/ (protobuf messages, gRPC stubs, .pyi type stubs) from protos/.

Run from the repository root:  python protos/generate.py   (needs the dev extra: grpcio-tools,
mypy-protobuf). The output is committed; .ci/run regenerates it and fails if it differs, so the
committed code always matches the .proto files. Never edit permindex/v1/ by hand.
"""

from __future__ import annotations

import os
import pathlib
import sys

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    # protoc finds the mypy plugin (protoc-gen-mypy) on PATH: use the one beside this Python.
    bindir = str(pathlib.Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"--proto_path={ROOT / 'protos'}",
        f"--python_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        f"--mypy_out={ROOT}",
        *protos,
    ]
    code = protoc.main(args)
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return int(code)
    init = ROOT / "permindex" / "v1" / "__init__.py"
    init.write_text('"""Generated protobuf and gRPC code for permindex.v1 (see protos/)."""\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
