import argparse
import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.core import klog

# Go klog's header: Lmmdd hh:mm:ss.uuuuuu <pid, 7 columns> file:line]
KLOG_LINE = re.compile(
    r"^(?P<sev>[IWEF])(?P<mmdd>\d{4}) (?P<time>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>[ \d]{7}) "
    r"(?P<file>[^ :]+):(?P<line>\d+)\] (?P<msg>.*)$"
)


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buf = io.StringIO()
    klog.setup(0, buf)
    yield buf
    klog.setup(0, io.StringIO())


def lines(buf: io.StringIO) -> list[str]:
    return buf.getvalue().splitlines()


def test_line_format_is_klogs(stream: io.StringIO) -> None:
    log = klog.get_logger("hami.scheduler.engine.decision")
    expected_line = sys._getframe().f_lineno + 1
    log.info("Filtering node %s for pod %s", "gpu-node-01", "test-pod")
    (line,) = lines(stream)
    m = KLOG_LINE.match(line)
    assert m, line
    assert m["sev"] == "I"
    assert int(m["pid"]) == os.getpid()
    assert len(m["pid"]) == 7
    assert (m["file"], int(m["line"])) == ("test_klog.py", expected_line)
    assert m["msg"] == "Filtering node gpu-node-01 for pod test-pod"


def test_severity_letters(stream: io.StringIO) -> None:
    log = klog.get_logger("x")
    log.info("a")
    log.warning("b")
    log.error("c")
    with pytest.raises(SystemExit) as exit_info:
        log.fatal("d")
    assert exit_info.value.code == 255
    assert [line[0] for line in lines(stream)] == ["I", "W", "E", "F"]
    # Libraries logging through the stdlib get the same format.
    logging.getLogger("urllib3").warning("retrying")
    assert KLOG_LINE.match(lines(stream)[-1])


def test_verbosity_gating(stream: io.StringIO) -> None:
    log = klog.get_logger("x")
    klog.set_verbosity(2)
    log.v(2).info("score node-a=%d", 7)
    log.v(4).info("per-node verdict")
    log.v(5).info_s("trace", node="n1")
    assert not log.v(4)
    assert log.v(2)
    assert klog.v(2) and not klog.v(3)
    klog.set_verbosity(5)
    log.v(5).info_s("Listed nodes", nodeCount=3, ok=True, name='a "b"')
    out = lines(stream)
    assert [KLOG_LINE.match(line)["msg"] for line in out] == [  # type: ignore[index]
        "score node-a=7",
        '"Listed nodes" nodeCount=3 ok=true name="a \\"b\\""',
    ]
    assert KLOG_LINE.match(out[1])["file"] == "test_klog.py"  # type: ignore[index]


def test_disabled_level_does_not_format(stream: io.StringIO) -> None:
    class Boom:
        def __str__(self) -> str:
            raise AssertionError("formatted although disabled")

    klog.get_logger("x").v(4).info("%s", Boom())
    assert stream.getvalue() == ""


def test_error_s_and_traceback(stream: io.StringIO) -> None:
    log = klog.get_logger("x")
    log.error_s(ValueError("boom"), "Failed to patch node", nodeName="gpu-node-01")
    try:
        raise RuntimeError("kaput")
    except RuntimeError:
        log.error("collect failed", exc_info=True)
    out = lines(stream)
    assert out[0].endswith('] "Failed to patch node" err="boom" nodeName="gpu-node-01"')
    assert out[1].startswith("E") and out[1].endswith("] collect failed")
    assert out[-1] == "RuntimeError: kaput"


@pytest.mark.parametrize("argv, level", [
    (["-v=4"], 4), (["--v=5"], 5), (["-v", "2"], 2), (["--v", "3"], 3), ([], 0),
])
def test_flags_accept_the_guides_spellings(argv: list[str], level: int) -> None:
    parser = argparse.ArgumentParser()
    klog.add_log_flags(parser)
    assert parser.parse_args(argv).v == level


def test_flags_reject_negative() -> None:
    parser = argparse.ArgumentParser()
    klog.add_log_flags(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["-v=-1"])


def grep(args: list[str], text: str) -> list[str]:
    done = subprocess.run(["grep", *args], input=text, capture_output=True, text=True, check=False)
    return done.stdout.splitlines()


def test_guide_grep_recipes_match_our_lines(stream: io.StringIO, tmp_path: Path) -> None:
    log = klog.get_logger("hami.scheduler")
    klog.set_verbosity(4)
    log.v(4).info("Filtering node %s for pod %s", "gpu-node-01", "test-pod")
    log.v(4).info("Node gpu-node-01 filtered out: CardInsufficientMemory, requested 8192Mi but "
                  "available 4096Mi")
    log.warning("FilteringFailed pod default/test-pod: CardInsufficientMemory on node gpu-node-01")
    log.info("unrelated line for pod other-pod")
    text = stream.getvalue()

    # docs/guides/scheduler-debugging.md §3.2: kubectl logs $SCHEDULER_POD -n kube-system | grep
    # "<target-pod-name>"
    assert len(grep(["test-pod"], text)) == 2
    # docs/guides/scheduler-debugging.md §3.2: kubectl logs $SCHEDULER_POD -n kube-system | grep
    # "FilteringFailed"
    (failed,) = grep(["FilteringFailed"], text)
    assert failed.startswith("W")
    # the example lines of docs/guides/scheduler-debugging.md §3.2 as HAMi prints them; klog pads the pid to
    # 7 columns where HAMi shows 2, so a recipe keyed on the header must allow runs of blanks: both forms
    # match this one.
    header = r"^[IWEF][0-9]{4} [0-9:.]{15} +[0-9]+ +[a-z_]+\.[a-z]+:[0-9]+\] "
    guide_example = (
        "I0211 10:30:15.123456  1  filter.go:125] Filtering node gpu-node-01 for pod test-pod\n"
        "I0211 10:30:15.123789  1  filter.go:150] Node gpu-node-01 filtered out: "
        "CardInsufficientMemory, requested 8192Mi but available 4096Mi\n"
    )
    assert len(grep(["-E", header], guide_example)) == 2
    assert len(grep(["-E", header], text)) == 4
    # Errors and warnings only, as one greps klog output.
    assert grep(["-E", "^[EW][0-9]{4} "], text) == [failed]
    assert len(grep(["filtered out: CardInsufficientMemory"], text)) == 1
