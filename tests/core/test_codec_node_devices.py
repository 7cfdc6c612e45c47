"""hami.io/node-nvidia-register and node-nvidia-score: documented literals, Go decoding rules, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.codec.errors import CodecError
from hami.core.codec.node_devices import (
    decode_legacy_node_devices,
    decode_node_devices,
    decode_pair_scores,
    encode_legacy_node_devices,
    encode_node_devices,
    encode_pair_scores,
    get_node_devices,
)
from hami.core.devices import DeviceInfo, MigPlacement, MigProfile

TWO_V100 = (
    '[{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,'
    '"type":"NVIDIA-Tesla V100-PCIE-32GB","mode":"hami-core","health":true},'
    '{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,'
    '"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}]'
)
V100_A = DeviceInfo(
    id="GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",
    count=10,
    devmem=32768,
    devcore=100,
    type="NVIDIA-Tesla V100-PCIE-32GB",
    mode="hami-core",
    health=True,
)
V100_B = DeviceInfo(
    id="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
    index=1,
    count=10,
    devmem=32768,
    devcore=100,
    type="NVIDIA-Tesla V100-PCIE-32GB",
    numa=1,
    mode="hami-core",
    health=True,
)


def test_two_v100_register_json_is_byte_exact() -> None:
    assert encode_node_devices([V100_A, V100_B]) == TWO_V100
    assert decode_node_devices(TWO_V100) == [V100_A, V100_B]


def test_go_test_literal_with_explicit_zero_fields() -> None:
    text = (
        '[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4",'
        '"numa":0,"health":true,"index":0}]'
    )
    dev = DeviceInfo(id="GPU-0", count=5, devmem=8192, devcore=100, type="NVIDIA-Tesla P4", health=True)
    assert decode_node_devices(text) == [dev]
    # Re-encoding drops the explicit zeros (omitempty) and restores struct order.
    assert encode_node_devices([dev]) == (
        '[{"id":"GPU-0","count":5,"devmem":8192,"devcore":100,"type":"NVIDIA-Tesla P4","health":true}]'
    )


def test_all_zero_device_encodes_as_empty_object() -> None:
    assert encode_node_devices([DeviceInfo(id="")]) == "[{}]"
    assert encode_node_devices([]) == "[]"


def test_mig_profiles_on_the_wire() -> None:
    prof = MigProfile(name="1g.5gb", memory_mb=4864, core=15, slice_count=1, placements=(MigPlacement(6, 1),))
    dev = DeviceInfo(
        id="GPU-m",
        count=7,
        devmem=40960,
        devcore=100,
        type="NVIDIA A100-SXM4-40GB",
        mode="mig",
        health=True,
        mig_profiles=(prof,),
    )
    text = encode_node_devices([dev])
    assert text == (
        '[{"id":"GPU-m","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",'
        '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,'
        '"placements":[{"start":6,"size":1}]}],"health":true}]'
    )
    assert decode_node_devices(text) == [dev]


def test_keys_are_case_insensitive_and_last_duplicate_wins() -> None:
    text = (
        '[{"ID":"GPU-1","Index":2,"COUNT":3,"DevMem":4,"devCore":5,"Type":"t","NUMA":1,"Mode":"mps",'
        '"HEALTH":true,"count":9,"MigProfiles":[{"NAME":"x","memorymb":1,"CORE":2,"slicecount":3,'
        '"Placements":[{"START":1,"Size":2}]}],"unknown":[1,2]}]'
    )
    (dev,) = decode_node_devices(text)
    assert (
        dev.id,
        dev.index,
        dev.count,
        dev.devmem,
        dev.devcore,
        dev.type,
        dev.numa,
        dev.mode,
        dev.health,
    ) == ("GPU-1", 2, 9, 4, 5, "t", 1, "mps", True)
    assert dev.mig_profiles == (MigProfile("x", 1, 2, 3, (MigPlacement(1, 2),)),)


def test_go_unicode_folding_matches_long_s() -> None:
    # Go folds U+017F (ſ) to 's' when matching field names (here "sliceCount").
    (dev,) = decode_node_devices('[{"migProfiles":[{"\u017fliceCount":3}]}]')
    assert dev.mig_profiles[0].slice_count == 3


def test_null_fields_keep_zero_and_null_array_is_empty() -> None:
    assert decode_node_devices('[{"id":"a","count":null,"health":null}]') == [DeviceInfo(id="a")]
    assert decode_node_devices("null") == []
    assert decode_node_devices("[]") == []


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[{"count":"10"}]', "count"),
        ('[{"count":1.5}]', "count"),
        ('[{"count":1e2}]', "count"),
        ('[{"count":2147483648}]', "count"),
        ('[{"index":-1}]', "index"),
        ('[{"health":"true"}]', "health"),
        ('[{"id":5}]', "id"),
        ('[{"migProfiles":{}}]', "migProfiles"),
        ('[{"migProfiles":[{"placements":[{"size":"1"}]}]}]', "placements[0].size"),
        ('[{"custominfo":[]}]', "custominfo"),
        ("[null]", "[0]"),
        ("[1]", "[0]"),
        ('{"id":"a"}', "node-nvidia-register"),
        ('[{"count":NaN}]', "offset"),
        ("[{", "offset"),
        ("", "offset 0"),
    ],
)
def test_decode_errors_name_the_place(text: str, where: str) -> None:
    with pytest.raises(CodecError) as info:
        decode_node_devices(text)
    assert where in info.value.where
    assert where in str(info.value)


def test_get_node_devices_outcomes() -> None:
    with pytest.raises(CodecError, match=r"^annos not found hami\.io/node-nvidia-register$"):
        get_node_devices({})
    with pytest.raises(CodecError, match=r"^no gpu found on node$"):
        get_node_devices({"hami.io/node-nvidia-register": "[]"})
    with pytest.raises(CodecError, match="invalid JSON"):
        get_node_devices({"hami.io/node-nvidia-register": "GPU-0,10,1,100,T,0,true:"})
    devs = get_node_devices(
        {"hami.io/node-nvidia-register": TWO_V100},
        '[{"uuid":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","score":{"x":100}}]',
    )
    assert [d.device_vendor for d in devs] == ["NVIDIA", "NVIDIA"]
    assert devs[0].pair_score == {"x": 100}
    assert devs[1].pair_score == {}


def test_pair_scores() -> None:
    text = '[{"uuid":"GPU-0","score":{"GPU-1":100,"GPU-2":-5}},{"UUID":"GPU-1","Score":{"GPU-0":100}}]'
    assert decode_pair_scores(text) == {"GPU-0": {"GPU-1": 100, "GPU-2": -5}, "GPU-1": {"GPU-0": 100}}
    assert (
        encode_pair_scores({"GPU-0": {"GPU-2": 1, "GPU-1": 100}})
        == '[{"uuid":"GPU-0","score":{"GPU-1":100,"GPU-2":1}}]'
    )
    for bad in ('[{"uuid":"a","score":[]}]', '[{"uuid":"a","score":{"b":"1"}}]', "{", '[{"uuid":1}]'):
        with pytest.raises(CodecError):
            decode_pair_scores(bad)


def test_go_string_escaping() -> None:
    dev = DeviceInfo(id="a<b>&c\u2028\n\x01é\x7f")
    assert encode_node_devices([dev]) == '[{"id":"a\\u003cb\\u003e\\u0026c\\u2028\\n\\u0001é\x7f"}]'
    assert decode_node_devices(encode_node_devices([dev])) == [dev]


# ---- legacy colon/comma form ----

LEGACY_DOC = (
    "GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
)


def test_legacy_seven_field_doc_example() -> None:
    devs = decode_legacy_node_devices(LEGACY_DOC)
    assert [d.id for d in devs] == ["GPU-0055", "GPU-0fc3"]
    assert all(d.mode == "hami-core" and d.index == 0 and d.health and d.devmem == 32768 for d in devs)


def test_legacy_nine_field_example_is_byte_exact() -> None:
    text = (
        "GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:"
        "GPU-0fc3,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,1,true,1,hami-core:"
    )
    devs = decode_legacy_node_devices(text)
    assert (devs[1].numa, devs[1].index) == (1, 1)
    assert encode_legacy_node_devices(devs) == text


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("GPU-0,10,32768,100,T,0,true", "no ':'"),
        ("nocomma:", "no ','"),
        ("a,1,2,3,t,0,true,0:", "8 fields"),
        ("a,x,2,3,t,0,true:", "count"),
        ("a,1,2,3,t,0,yes:", "health"),
        ("ok,1,2,3,t,0,true:a,1,2,3,t,0,true,-1,m:", "segment 1 field 7"),
    ],
)
def test_legacy_errors(text: str, what: str) -> None:
    with pytest.raises(CodecError, match=what):
        decode_legacy_node_devices(text)


# ---- round trips ----

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_int32 = st.integers(-(2**31), 2**31 - 1)
_profiles = st.builds(
    MigProfile,
    name=_text,
    memory_mb=_int32,
    core=_int32,
    slice_count=_int32,
    placements=st.lists(st.builds(MigPlacement, _int32, _int32), max_size=3).map(tuple),
)
_devices = st.builds(
    DeviceInfo,
    id=_text,
    index=st.integers(0, 2**64 - 1),
    count=_int32,
    devmem=_int32,
    devcore=_int32,
    type=_text,
    numa=st.integers(-(2**63), 2**63 - 1),
    mode=_text,
    health=st.booleans(),
    mig_profiles=st.lists(_profiles, max_size=2).map(tuple),
)


@given(st.lists(_devices, max_size=4))
def test_json_round_trip(devs: list[DeviceInfo]) -> None:
    assert decode_node_devices(encode_node_devices(devs)) == devs


_legacy_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters=",:"), max_size=10
)


@given(
    st.lists(
        st.builds(
            DeviceInfo,
            id=_legacy_text,
            index=st.integers(0, 2**64 - 1),
            count=_int32,
            devmem=_int32,
            devcore=_int32,
            type=_legacy_text,
            numa=st.integers(-(2**63), 2**63 - 1),
            mode=_legacy_text,
            health=st.booleans(),
        ),
        max_size=4,
    )
)
def test_legacy_round_trip(devs: list[DeviceInfo]) -> None:
    text = encode_legacy_node_devices(devs)
    assert decode_legacy_node_devices(text or ":") == devs


def test_legacy_encoder_refuses_separators() -> None:
    with pytest.raises(CodecError, match=r"device\[0\]\.id"):
        encode_legacy_node_devices([DeviceInfo(id="a:b")])


def test_encoder_refuses_values_go_cannot_hold() -> None:
    with pytest.raises(CodecError, match=r"device\[0\]\.count"):
        encode_node_devices([DeviceInfo(id="a", count=2**31)])
    with pytest.raises(CodecError, match=r"device\[0\]\.index"):
        encode_node_devices([DeviceInfo(id="a", index=-1)])
    with pytest.raises(CodecError, match=r"migProfiles\[0\]"):
        encode_node_devices([DeviceInfo(id="a", mig_profiles=(MigProfile("p", 2**31, 0, 0),))])
