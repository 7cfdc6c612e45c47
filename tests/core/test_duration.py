"""Durations: Go's ParseDuration and Duration.String() (checked against Go itself), the flag
parser's opt-ins (bare seconds, negative values) and Prometheus windows."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.duration import (
    DurationError,
    duration_flag,
    format_duration,
    format_go_duration,
    parse_duration,
    parse_go_duration,
    parse_prometheus_duration,
    prometheus_duration_flag,
)

INT64 = st.integers(-(2**63), 2**63 - 1)

# Reads `p "<text>"` (parse) and `f "<nanoseconds>"` (format) lines; answers each with a quoted line.
GO_REFERENCE = """package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		line := in.Text()
		arg, _ := strconv.Unquote(line[2:])
		if line[0] == 'f' {
			n, _ := strconv.ParseInt(arg, 10, 64)
			fmt.Fprintln(out, strconv.Quote(time.Duration(n).String()))
		} else if d, err := time.ParseDuration(arg); err != nil {
			fmt.Fprintln(out, strconv.Quote("ERR "+err.Error()))
		} else {
			fmt.Fprintln(out, strconv.Quote(strconv.FormatInt(int64(d), 10)))
		}
	}
}
"""


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0s"), (500_000_000, "500ms"), (5400 * 10**9, "1h30m0s"), (300_000, "300µs"), (1, "1ns"),
     (1_500_000_000, "1.5s"), (90 * 10**9, "1m30s"), (-(10**9), "-1s"),
     (2**63 - 1, "2562047h47m16.854775807s")],
)
def test_format_is_gos_string(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "ns"),
    [("500ms", 500_000_000), ("1h30m", 5400 * 10**9), ("5m", 300 * 10**9), ("1.5h", 5400 * 10**9),
     ("300us", 300_000), ("300µs", 300_000), ("-1s", -(10**9)), ("+5s", 5 * 10**9), ("0", 0), ("-0", 0),
     (".5s", 500_000_000), ("1.s", 10**9), ("1h0m0s", 3600 * 10**9)],
)
def test_parse_accepts_gos_syntax(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [("", 'time: invalid duration ""'), ("5", 'time: missing unit in duration "5"'),
     ("5x", 'time: unknown unit "x" in duration "5x"'), (".s", 'time: invalid duration ".s"'),
     ("5m 3s", 'time: unknown unit "m " in duration "5m 3s"'),
     ("1d", 'time: unknown unit "d" in duration "1d"'),
     ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"')],
)
def test_parse_rejects_with_gos_messages(text: str, message: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_go_duration(text)
    assert str(err.value) == message


@given(INT64)
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_go_duration(format_go_duration(ns)) == ns


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=100_000)))
def test_timedeltas_round_trip_through_flags(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@given(st.text(max_size=12))
def test_any_text_parses_or_raises_duration_error(text: str) -> None:
    try:
        parse_duration(text, bare_seconds=True, negative=True)
    except DurationError as err:
        assert "want a Go duration" in str(err)


@pytest.fixture(scope="module")
def go_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (Debian package golang-go)")
    home = tmp_path_factory.mktemp("gohome")
    (home / "main.go").write_text(GO_REFERENCE, encoding="utf-8")
    env = dict(os.environ, HOME=str(home), GOCACHE=str(home / "cache"), GOPATH=str(home / "gopath"))
    subprocess.run([go, "build", "-o", "durations", "main.go"], cwd=home, env=env, check=True, timeout=240,
                   capture_output=True)
    return home / "durations"


def test_parser_and_formatter_agree_with_go(go_reference: Path) -> None:
    """30,000 inputs through Go's time package and ours: values and error texts identical."""
    rng = random.Random(1)
    atoms = ["0", "1", "9", "007", ".", "12", "99999999999", "9223372036854775808", "1.5", "0.000000001",
             "2562047", "h", "m", "s", "ms", "us", "µs", "μs", "ns", "d", "x", "-", "+", " ", "\\", '"', "é"]
    texts = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 6))) for _ in range(20_000)]
    numbers = [rng.randint(-(2**63), 2**63 - 1) for _ in range(5_000)]
    numbers += [rng.randint(0, 10 ** rng.randint(0, 13)) for _ in range(5_000)]
    lines = [f"p {json.dumps(t, ensure_ascii=False)}" for t in texts] + [f'f "{n}"' for n in numbers]
    done = subprocess.run([go_reference], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          check=True, timeout=120)
    want = [json.loads(line) for line in done.stdout.splitlines()]
    got: list[str] = []
    for text in texts:
        try:
            got.append(str(parse_go_duration(text)))
        except DurationError as err:
            got.append(f"ERR {err}")
    got += [format_go_duration(n) for n in numbers]
    assert len(want) == len(got)
    assert [(line, w) for line, w, g in zip(lines, want, got, strict=True) if w != g] == []


def test_flag_values_as_timedeltas() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("1500ns") == timedelta(microseconds=1)  # timedelta's resolution
    assert parse_duration("30", bare_seconds=True) == timedelta(seconds=30)
    assert parse_duration("2.5", bare_seconds=True) == timedelta(seconds=2.5)
    assert parse_duration("-1s", negative=True) == timedelta(seconds=-1)


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [("30", {}, "invalid duration '30': want a Go duration such as 300ms"),
     ("5 minutes", {"bare_seconds": True}, "want a Go duration such as 300ms, 90s, 5m, 1.5h or 1h30m "
      "(units ns, us, ms, s, m, h), or a number of seconds"),
     ("-1s", {}, "invalid duration '-1s': must not be negative"),
     ("-3", {"bare_seconds": True}, "must not be negative"),
     ("1e3", {"bare_seconds": True}, "want a Go duration"),
     ("9" * 30, {"bare_seconds": True}, "want a Go duration")],
)
def test_flag_errors_name_the_syntax(text: str, options: dict[str, bool], message: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_duration(text, **options)
    assert message in str(err.value)


def test_argparse_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--timeout", type=duration_flag(), default=timedelta(minutes=5))
    assert parser.parse_args(["--timeout", "90s"]).timeout == timedelta(seconds=90)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--timeout", "soon"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --timeout: invalid duration 'soon': want a Go duration such as 300ms" in err


def test_seconds_and_timedeltas_format_alike() -> None:
    assert format_duration(28.0) == format_duration(timedelta(seconds=28)) == "28s"
    assert [format_duration(s) for s in (0.5, 1.5, 90, 3600)] == ["500ms", "1.5s", "1m30s", "1h0m0s"]


@pytest.mark.parametrize(
    ("text", "value"),
    [("7d", timedelta(days=7)), ("1w", timedelta(weeks=1)), ("1h30m", timedelta(minutes=90)),
     ("250ms", timedelta(milliseconds=250)), ("0", timedelta(0)), ("1y", timedelta(days=365)),
     ("1d12h", timedelta(hours=36))],
)
def test_prometheus_durations(text: str, value: timedelta) -> None:
    assert parse_prometheus_duration(text) == value


@pytest.mark.parametrize("text", ["", "7", "1.5h", "30m1h", "5 minutes", "-1d", "1dd", "1us"])
def test_prometheus_durations_rejected(text: str) -> None:
    with pytest.raises(DurationError, match="want a Prometheus duration such as 30m, 6h, 7d or 1w"):
        parse_prometheus_duration(text)


def test_prometheus_flag_hands_the_text_on_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--window", type=prometheus_duration_flag, default="7d")
    assert parser.parse_args(["--window", "1w"]).window == "1w"
    with pytest.raises(SystemExit):
        parser.parse_args(["--window", "90"])
    assert "argument --window: invalid duration '90': want a Prometheus duration" in capsys.readouterr().err
