"""klog-compatible logging on the stdlib `logging` module.

Lines look exactly like Go klog's text output, so the `grep` recipes of docs/guides/ and every klog-aware
log pipeline work on our daemons unchanged::

    I1123 10:30:15.123456    1234 filter.py:125] Filtering node gpu-node-01 for pod test-pod

severity letter (I, W, E, F), MMDD, local time with microseconds, the process id right-aligned in
7 columns (klog prints the pid; it is 1 in a container), the caller's file basename and line, `] `.

Component-facing API::

    from hami.core import klog

    klog.add_log_flags(parser)           # -v/--v N (also -v=N, --v=N), default 0
    args = parser.parse_args()
    klog.setup(args.v)                   # once, in main(); stream defaults to sys.stderr

    log = klog.get_logger(__name__)
    log.info("registered %d devices", n)            # printf-style, formatted only when emitted
    log.warning("..."); log.error("...", exc_info=True); log.fatal("...")  # fatal exits 255
    log.info_s("Listed nodes", nodeCount=3)         # klog InfoS: "Listed nodes" nodeCount=3
    log.error_s(err, "Failed to patch node", nodeName=name)
    log.v(4).info("node %s filtered out: %s", node, reason)   # emitted only at -v>=4
    if log.v(5):                                    # guard work that only a trace needs
        log.v(5).info("trace %s", expensive())

Verbosity conventions (docs/guides/scheduler-debugging.md §2, docs/guides/device-plugin-debugging.md §1.1):
V(2) scoring details, V(4) per-node filter verdicts and collection details, V(5) full trace. `log.v(n)` costs
one integer comparison when disabled.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import IO, Any, Final

FATAL_EXIT_CODE: Final = 255  # klog.Fatal exits with 255



class _Level:
    """The process-wide `-v` level (a holder, so that it can change without `global`)."""

    value = 0


_level = _Level()


class KlogFormatter(logging.Formatter):
    """Formats a record as a klog text line (header + message + optional traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        created = record.created
        tm = time.localtime(created)
        micros = int(created * 1_000_000) % 1_000_000
        header = (
            f"{_severity_letter(record.levelno)}{tm.tm_mon:02d}{tm.tm_mday:02d} "
            f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}.{micros:06d} "
            f"{record.process or os.getpid():7d} {record.filename}:{record.lineno}] "
        )
        line = header + record.getMessage()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _severity_letter(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "F"
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"


def format_kv(msg: str, kv: dict[str, Any]) -> str:
    """klog's structured (InfoS) text form: `"msg" key="value" n=3 ok=true`."""
    parts = [_quote(msg)]
    parts.extend(f"{key}={_kv_value(value)}" for key, value in kv.items())
    return " ".join(parts)


def _kv_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return _quote(str(value))


def _quote(text: str) -> str:
    # Go's strconv.Quote for the common cases: backslash, quote and control characters escaped.
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{escaped}"'


class Verbose:
    """What `Logger.v(level)` returns when the level is enabled: logs at info severity."""

    __slots__ = ("_logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def __bool__(self) -> bool:
        return True

    def info(self, msg: str, *args: object) -> None:
        self._logger.log(logging.INFO, msg, *args, stacklevel=2)

    def info_s(self, msg: str, **kv: Any) -> None:
        self._logger.log(logging.INFO, "%s", format_kv(msg, kv), stacklevel=2)


class _Disabled(Verbose):
    """Returned for disabled levels: falsy, and its methods do nothing."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def info(self, msg: str, *args: object) -> None:
        return None

    def info_s(self, msg: str, **kv: Any) -> None:
        return None


_DISABLED: Final = _Disabled(logging.getLogger("hami.klog.disabled"))


class Logger:
    """klog-style facade over one stdlib logger; the caller's file:line is reported."""

    __slots__ = ("_logger", "_verbose", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger = logging.getLogger(name)
        self._verbose = Verbose(self._logger)

    def v(self, level: int) -> Verbose:
        return self._verbose if level <= _level.value else _DISABLED

    def info(self, msg: str, *args: object) -> None:
        self._logger.log(logging.INFO, msg, *args, stacklevel=2)

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._logger.log(logging.WARNING, msg, *args, exc_info=exc_info, stacklevel=2)

    def error(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._logger.log(logging.ERROR, msg, *args, exc_info=exc_info, stacklevel=2)

    def fatal(self, msg: str, *args: object) -> None:
        """Log at F severity and exit with klog's status 255."""
        self._logger.log(logging.CRITICAL, msg, *args, stacklevel=2)
        for handler in logging.getLogger().handlers:
            handler.flush()
        raise SystemExit(FATAL_EXIT_CODE)

    def info_s(self, msg: str, **kv: Any) -> None:
        self._logger.log(logging.INFO, "%s", format_kv(msg, kv), stacklevel=2)

    def error_s(self, err: BaseException | str | None, msg: str, **kv: Any) -> None:
        fields = {"err": str(err)} if err is not None else {}
        fields.update(kv)
        self._logger.log(logging.ERROR, "%s", format_kv(msg, fields), stacklevel=2)


def get_logger(name: str) -> Logger:
    return Logger(name)


def v(level: int) -> bool:
    """True when `-v` is at least `level` (for guarding expensive log-only work)."""
    return level <= _level.value


def verbosity() -> int:
    return _level.value


def set_verbosity(level: int) -> None:
    """Change the level at run time (e.g. from a debug endpoint); setup() sets it at start."""
    if level < 0:
        raise ValueError(f"verbosity must be >= 0, got {level}")
    _level.value = level


def setup(verbosity: int = 0, stream: IO[str] | None = None) -> logging.Handler:
    """Route all stdlib logging (ours and libraries') to `stream` in klog format.

    Replaces the root logger's handlers, so calling it again (tests) does not duplicate lines.
    Returns the installed handler.
    """
    set_verbosity(verbosity)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(KlogFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return handler


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"log level must be an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"log level must be >= 0, got {value}")
    return value


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """Add klog's `-v`/`--v` (accepts `-v=4`, `--v=4`, `-v 4`, `-v4`)."""
    parser.add_argument(
        "-v", "--v", dest="v", type=_non_negative, default=0, metavar="N",
        help="log verbosity: 2 scoring details, 4 per-node verdicts and collection details, 5 full trace",
    )
