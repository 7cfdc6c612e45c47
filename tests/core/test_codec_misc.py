"""Device cordon (§1.4), MIG allocations (§2.4) and Kubernetes quantities.

Section signs (§) refer to docs/design/scheduler-annotations.md.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.codec.cordon import format_cordon, parse_cordon
from hami.core.codec.errors import CodecError
from hami.core.codec.mig import decode_mig_allocations, encode_mig_allocations
from hami.core.codec.quantity import parse_quantity
from hami.core.devices import MigAllocation, MigPlacement


def test_cordon() -> None:
    assert parse_cordon(" GPU-a, ,GPU-b,,GPU-a ") == frozenset({"GPU-a", "GPU-b"})
    assert parse_cordon("") == frozenset()
    assert parse_cordon(None) == frozenset()
    assert format_cordon({"GPU-b", "GPU-a"}) == "GPU-a,GPU-b"
    with pytest.raises(CodecError, match="uuid"):
        format_cordon({"a,b"})


SCHEDULER_MIG = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
    '"placement":{"start":6,"size":1}}]'
)


def test_mig_allocations_literal_and_runtime_identity() -> None:
    (a,) = decode_mig_allocations(SCHEDULER_MIG)
    assert a == MigAllocation(0, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1))
    assert encode_mig_allocations([a]) == SCHEDULER_MIG
    full = MigAllocation(1, 0, "GPU-a", "3g.20gb", MigPlacement(0, 4), "MIG-x", 2, 0)
    text = encode_mig_allocations([full])
    assert text.endswith(',"migUUID":"MIG-x","gpuInstanceID":2,"computeInstanceID":0}]')
    assert decode_mig_allocations(text) == [full]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (
            '[{"containerIndex":-1,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{"size":1}}]',
            "negative",
        ),
        (
            '[{"containerIndex":0,"deviceIndex":-1,"gpuUUID":"g","profile":"p","placement":{"size":1}}]',
            "negative",
        ),
        ('[{"gpuUUID":"","profile":"p","placement":{"size":1}}]', "gpuUUID"),
        ('[{"gpuUUID":"g","profile":"","placement":{"size":1}}]', "profile"),
        ('[{"gpuUUID":"g","profile":"p","placement":{"start":1}}]', "size"),
        (
            '[{"gpuUUID":"g","profile":"p","placement":{"size":1},"migUUID":"m","gpuInstanceID":1}]',
            "together",
        ),
        ('[{"gpuUUID":"g","profile":"p","placement":{"size":1},"gpuInstanceID":-1}]', "range"),
        (
            '[{"gpuUUID":"g","profile":"p","placement":{"size":1}},{"gpuUUID":"h","profile":"p","placement":{"size":2}}]',
            "duplicate",
        ),
    ],
)
def test_mig_allocation_errors(text: str, what: str) -> None:
    with pytest.raises(CodecError, match=what):
        decode_mig_allocations(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", "1"),
        ("0", "0"),
        ("-5", "-5"),
        ("+5", "5"),
        ("1.5", "1.5"),
        (".5", "0.5"),
        ("5.", "5"),
        ("100m", "0.1"),
        ("1k", "1000"),
        ("2M", "2000000"),
        ("3G", "3e9"),
        ("4T", "4e12"),
        ("5P", "5e15"),
        ("6E", "6e18"),
        ("1Ki", "1024"),
        ("1Mi", "1048576"),
        ("1.5Gi", "1610612736"),
        ("2Ti", str(2 * 1024**4)),
        ("1Pi", str(1024**5)),
        ("1Ei", str(1024**6)),
        ("1e3", "1000"),
        ("1E3", "1000"),
        ("12e-3", "0.012"),
        ("1e+2", "100"),
        ("0.1Gi", "107374182.4"),
    ],
)
def test_quantity(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1KB",
        "1ki",
        "1K",
        "Gi",
        "1.2.3",
        "1e",
        "1e1.5",
        "--1",
        "1_000",
        "1e99999",
        "1u",
        "1n",
        "0x10",
    ],
)
def test_quantity_errors(text: str) -> None:
    with pytest.raises(CodecError, match="quantit"):
        parse_quantity(text)


@given(st.integers(-(10**30), 10**30), st.sampled_from(["", "k", "Ki", "Mi", "m", "e3"]))
def test_quantity_integers_are_exact(n: int, suffix: str) -> None:
    factor = {"": 1, "k": 1000, "Ki": 1024, "Mi": 1024**2, "m": Decimal("0.001"), "e3": 1000}[suffix]
    with localcontext(prec=100):  # the default 28 digits would round the expected value itself
        expected = n * factor
    assert parse_quantity(f"{n}{suffix}") == expected
