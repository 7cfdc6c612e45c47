"""Regenerates the kubelet device-plugin messages from src/hami/deviceplugin/api/deviceplugin.proto.

Usage: python scripts/gen_proto.py [OUT_DIR]   (default: src, i.e. in place)

Only the messages (``deviceplugin_pb2``) are generated: the daemon serves through grpcio generic
handlers and the kubelet stand-in calls through plain channel callables
(``hami.testing.kubelet.DevicePluginClient``), so no generated service classes are shipped. The
proto is compiled relative to ``src``; mypy-protobuf writes the ``.pyi`` stub.
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


def _protoc(*outputs: str) -> None:
    args = ["grpc_tools.protoc", f"--proto_path={SRC}", *outputs, str(PROTO)]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    _protoc(
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
    )


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    generate(out.resolve())


if __name__ == "__main__":
    main()
