"""Numbers for a reader: one helper, the same text for the same quantity everywhere."""

from __future__ import annotations

import pytest

from hami.core import readable


@pytest.mark.parametrize(
    ("mib", "text"),
    [
        (0, "0 MiB"),
        (512, "512 MiB"),
        (1023.6, "1,024 MiB"),
        (1024, "1 GiB"),
        (1530, "1.5 GiB"),  # fragmented-node's free slice: not 1.49414 GiB
        (6120, "6 GiB"),
        (10189, "10 GiB"),  # 9.95 GiB rounds to 10, not 9.9 or 10.0
        (40960, "40 GiB"),
        (45056, "44 GiB"),
        (163840, "160 GiB"),
        (1048576, "1,024 GiB"),
    ],
)
def test_mib(mib: float, text: str) -> None:
    assert readable.mib(mib) == text


def test_numbers_percents_and_bytes() -> None:
    assert [readable.number(v) for v in (0, 2.0, 37.5, 1530, 1234567.25, -0.01)] == [
        "0", "2", "37.5", "1,530", "1,234,567.2", "0",
    ]
    assert readable.number(2 / 3, 2) == "0.67"
    assert [readable.percent(v) for v in (100, 37.5, 0.04)] == ["100%", "37.5%", "0%"]
    assert readable.size_bytes(14 * 2**30) == "14 GiB"
    assert readable.number(float("nan")) == "nan"
