"""Writing the CDI spec into the runtimes' spec directory: whole or not at all.

The document goes to a hidden temporary file in the same directory and is renamed over the spec, so a
runtime never reads half a spec and a failure leaves nothing behind. Also finds the driver files the
spec mounts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hami.deviceplugin.cdi import SPEC_FILE

# Driver files a CUDA container needs, by name stem, in the driver root's library directories.
DRIVER_LIBRARIES = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libcudadebugger.so",
)
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")
DRIVER_BINARIES = ("usr/bin/nvidia-smi",)
# Reasons of hami_deviceplugin_cdi_spec_errors_total.
NOT_WRITABLE = "not_writable"
NO_SPACE = "no_space"
IO_ERROR = "io_error"
REASONS = (NOT_WRITABLE, NO_SPACE, IO_ERROR)


class SpecWriteError(Exception):
    """The spec could not be written; ``reason`` is the metric label, ``str()`` the log line."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return NOT_WRITABLE
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NO_SPACE
    return IO_ERROR


def find_driver_files(driver_root: str) -> list[str]:
    """Versioned driver libraries and binaries present under ``driver_root``."""
    root = Path(driver_root)
    found: list[str] = []
    for lib_dir in LIBRARY_DIRS:
        directory = root / lib_dir
        if not directory.is_dir():
            continue
        for stem in DRIVER_LIBRARIES:
            found += sorted(str(p) for p in directory.glob(f"{stem}.*") if p.is_file())
    found += [str(root / b) for b in DRIVER_BINARIES if (root / b).is_file()]
    return found


def write_spec(directory: Path, spec: dict[str, Any]) -> Path:
    """Atomically write ``spec`` as ``<directory>/<SPEC_FILE>``; raises ``SpecWriteError``."""
    target = directory / SPEC_FILE
    tmp: str | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{SPEC_FILE}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        detail = exc.strerror or str(exc)
        raise SpecWriteError(_reason(exc), f"cannot write the CDI spec {target}: {detail}") from exc
    return target
