"""Regenerates the kubelet device-plugin stubs from src/hami/deviceplugin/api/deviceplugin.proto.

Usage: python scripts/gen_proto.py [OUT_DIR]   (default: src, i.e. in place)

The proto is compiled relative to ``src`` so the generated gRPC module imports its messages as
``hami.deviceplugin.api.deviceplugin_pb2``; mypy-protobuf writes the ``.pyi`` stubs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTO = Path("hami/deviceplugin/api/deviceplugin.proto")


def _plugin(name: str) -> str:
    # The mypy-protobuf plugins are installed next to the interpreter that runs this script.
    found = Path(sys.executable).parent / name
    if found.exists():
        return str(found)
    located = shutil.which(name)
    if located is None:
        raise SystemExit(f"{name} not found: install mypy-protobuf")
    return located


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={SRC}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        str(PROTO),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    generate(out.resolve())


if __name__ == "__main__":
    main()
