"""Regenerates the kubelet device-plugin stubs from src/hami/deviceplugin/api/deviceplugin.proto.

Usage: python scripts/gen_proto.py [OUT_DIR [GRPC_OUT_DIR]]
(defaults: src and src/hami/testing/kubelet_api, i.e. in place)

The messages (``deviceplugin_pb2``) go into the device plugin's package. The generated gRPC service
classes go into the test support (``hami.testing.kubelet_api``): the daemon serves through grpcio
generic handlers, and only the kubelet stand-in, the tests and the benchmark need the generated
client/servicer classes. The proto is compiled
relative to ``src`` so the gRPC module imports its messages as
``hami.deviceplugin.api.deviceplugin_pb2``; mypy-protobuf writes the ``.pyi`` stubs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTO = Path("hami/deviceplugin/api/deviceplugin.proto")
GRPC_OUT = SRC / "hami" / "testing" / "kubelet_api"


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


def generate(out_dir: Path, grpc_out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    grpc_out_dir.mkdir(parents=True, exist_ok=True)
    _protoc(
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        _protoc(
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--grpc_python_out={tmp}",
            f"--mypy_grpc_out={tmp}",
        )
        for made in (Path(tmp) / PROTO.parent).glob("*_grpc.py*"):
            shutil.copyfile(made, grpc_out_dir / made.name)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    grpc_out = Path(sys.argv[2]) if len(sys.argv) > 2 else GRPC_OUT
    generate(out.resolve(), grpc_out.resolve())


if __name__ == "__main__":
    main()
