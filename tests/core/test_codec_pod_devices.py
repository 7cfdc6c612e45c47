"""The pod device-allocation grammar (docs/design/scheduler-annotations.md §2.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.codec.errors import CodecError
from hami.core.codec.pod_devices import (
    MISSING_FIELDS,
    decode_container_devices,
    decode_pod_devices,
    encode_container_devices,
    encode_pod_devices,
)
from hami.core.devices import ContainerDevice

UUID = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
TWO_CONTAINERS = f"{UUID},NVIDIA,3000,0:;{UUID},NVIDIA,5000,0:;"


def test_two_containers_one_gpu_each() -> None:
    pod = ((ContainerDevice(UUID, "NVIDIA", 3000, 0),), (ContainerDevice(UUID, "NVIDIA", 5000, 0),))
    assert encode_pod_devices(pod) == TWO_CONTAINERS
    # HAMi keeps the piece after the final ';' as an empty trailing container.
    assert decode_pod_devices(TWO_CONTAINERS) == (*pod, ())


def test_one_container_two_gpus() -> None:
    c = (ContainerDevice("GPU-a", "NVIDIA", 1000, 30), ContainerDevice("GPU-b", "NVIDIA", 1000, 30))
    assert encode_container_devices(c) == "GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:"
    assert encode_pod_devices([c]) == "GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:;"
    assert decode_container_devices("GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:") == c


def test_empty_containers() -> None:
    assert encode_pod_devices([(), ()]) == ";;"
    assert decode_pod_devices(";;") == ((), (), ())
    assert decode_pod_devices("") == ((),)
    assert decode_container_devices("") == ()


def test_segments_without_comma_are_skipped_and_extra_fields_ignored() -> None:
    assert decode_container_devices("junk:GPU-a,NVIDIA,1,2,extra:") == (
        ContainerDevice("GPU-a", "NVIDIA", 1, 2),
    )


def test_missing_fields_error_text() -> None:
    with pytest.raises(CodecError) as info:
        decode_pod_devices("GPU-a,NVIDIA,1000:;")
    assert info.value.what == MISSING_FIELDS
    assert str(info.value).startswith(
        "pod annotation format error, missing fields, do not use nodeName in task spec"
    )
    assert "container 0 segment 0" in str(info.value)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a,N,2147483648,0:", "usedmem"),
        ("a,N,1,-2147483649:", "usedcores"),
        ("a,N, 1,0:", "usedmem"),
        ("a,N,1_0,0:", "usedmem"),
        ("a,N,1,x:", "usedcores"),
        (";a,N,1,0:b,N,1:", "container 1 segment 1"),
    ],
)
def test_int32_checks(text: str, where: str) -> None:
    with pytest.raises(CodecError, match=where):
        decode_pod_devices(text)


def test_int32_bounds_accepted() -> None:
    assert decode_container_devices("a,N,-2147483648,+2147483647:") == (
        ContainerDevice("a", "N", -(2**31), 2**31 - 1),
    )


def test_encoder_refuses_separators_and_out_of_range() -> None:
    with pytest.raises(CodecError, match="device 0 uuid"):
        encode_container_devices([ContainerDevice("a;b", "NVIDIA", 1, 1)])
    with pytest.raises(CodecError, match="device 1 usedmem"):
        encode_container_devices([ContainerDevice("a", "N", 1, 1), ContainerDevice("a", "N", 2**31, 1)])


_field = st.text(st.characters(exclude_characters=",:;", exclude_categories=("Cs",)), max_size=8)
_device = st.builds(
    ContainerDevice, _field, _field, st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)
)
_pod = st.lists(st.lists(_device, max_size=3).map(tuple), max_size=4).map(tuple)


@given(_pod)
def test_pod_round_trip_adds_the_trailing_empty_container(
    pod: tuple[tuple[ContainerDevice, ...], ...],
) -> None:
    assert decode_pod_devices(encode_pod_devices(pod)) == (*pod, ())


@given(st.lists(_device, max_size=4).map(tuple))
def test_container_round_trip(c: tuple[ContainerDevice, ...]) -> None:
    assert decode_container_devices(encode_container_devices(c)) == c
