"""Every decoder, fed arbitrary text or arbitrary JSON, returns data or raises CodecError: nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.core.codec.cordon import parse_cordon
from hami.core.codec.errors import CodecError
from hami.core.codec.handshake import check_handshake, parse_handshake
from hami.core.codec.mig import decode_mig_allocations
from hami.core.codec.node_devices import (
    decode_legacy_node_devices,
    decode_node_devices,
    decode_pair_scores,
    get_node_devices,
)
from hami.core.codec.nodelock import parse_node_lock
from hami.core.codec.pod_devices import decode_container_devices, decode_pod_devices
from hami.core.codec.quantity import parse_quantity

DECODERS: dict[str, Callable[[str], Any]] = {
    "node_devices": decode_node_devices,
    "legacy_node_devices": decode_legacy_node_devices,
    "pair_scores": decode_pair_scores,
    "get_node_devices": lambda t: get_node_devices({"hami.io/node-nvidia-register": t}, t),
    "pod_devices": decode_pod_devices,
    "container_devices": decode_container_devices,
    "handshake": parse_handshake,
    "node_lock": parse_node_lock,
    "cordon": parse_cordon,
    "mig_allocations": decode_mig_allocations,
    "quantity": parse_quantity,
}

# Text biased towards the grammars' own separators and words, so fuzzing reaches deep paths.
_atoms = st.sampled_from(
    [
        ",",
        ":",
        ";",
        "_",
        "-",
        ".",
        "T",
        "Z",
        "+",
        "e",
        "Gi",
        "m",
        "NVIDIA",
        "GPU-0",
        "true",
        "Requesting",
        "Reported ",
        "2025-06-13",
        "09:07:40",
        "2147483648",
        "-1",
        "0",
        "7",
        '{"',
        '":',
        "[",
        "]",
        "{",
        "}",
        "null",
        "1e3",
        "NaN",
        "\\u0000",
        "\ud800",
    ]
)
_text = st.one_of(st.text(), st.lists(st.one_of(_atoms, st.text(max_size=3)), max_size=30).map("".join))

_keys = st.sampled_from(
    [
        "id",
        "ID",
        "index",
        "count",
        "devmem",
        "devcore",
        "type",
        "numa",
        "mode",
        "health",
        "migProfiles",
        "name",
        "memoryMB",
        "placements",
        "start",
        "size",
        "uuid",
        "score",
        "containerIndex",
        "deviceIndex",
        "gpuUUID",
        "profile",
        "placement",
        "migUUID",
        "gpuInstanceID",
        "computeInstanceID",
        "custominfo",
        "x",
    ]
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=6)),
    max_leaves=25,
)


@pytest.mark.parametrize("name", sorted(DECODERS))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(text=_text)
def test_text_fuzz_raises_only_codec_error(name: str, text: str) -> None:
    try:
        DECODERS[name](text)
    except CodecError as exc:
        assert str(exc)


@pytest.mark.parametrize("name", ["node_devices", "pair_scores", "get_node_devices", "mig_allocations"])
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.one_of(_json, st.lists(st.dictionaries(_keys, _json, max_size=8), max_size=3)))
def test_json_fuzz_raises_only_codec_error(name: str, doc: Any) -> None:
    try:
        DECODERS[name](json.dumps(doc))
    except CodecError as exc:
        assert exc.what


def test_deep_nesting_is_a_codec_error() -> None:
    with pytest.raises(CodecError):
        decode_node_devices("[" * 100000)


@given(value=st.one_of(st.none(), _text), allocatable=st.integers(0, 8))
def test_check_handshake_never_raises(value: str | None, allocatable: int) -> None:
    from datetime import datetime

    healthy, need_update = check_handshake(value, datetime(2025, 6, 13, tzinfo=UTC), allocatable)
    assert isinstance(healthy, bool) and isinstance(need_update, bool)
