"""Object accessors are total: any JSON value reads as a string or a string mapping, never raises."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.core.objects import (
    annotations_of,
    labels_of,
    meta_field,
    metadata_of,
    name_of,
    namespace_of,
    object_key,
    resource_version,
    uid_of,
)

POD = {
    "metadata": {
        "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
        "annotations": {"a": "1"}, "labels": {"app": "x"},
    }
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


def test_fields_of_a_well_formed_object() -> None:
    assert (name_of(POD), namespace_of(POD), uid_of(POD), resource_version(POD)) == ("p", "ns", "u-1", "42")
    assert annotations_of(POD) == {"a": "1"} and labels_of(POD) == {"app": "x"}
    # Clean maps are handed back as they are: no copy on the informer's hot paths.
    assert annotations_of(POD) is POD["metadata"]["annotations"]


def test_object_keys_follow_meta_namespace_key_func() -> None:
    assert object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"
    assert object_key({"metadata": {"name": 5}}) == ""  # the informer skips such an object


@pytest.mark.parametrize(
    "obj",
    [None, 7, "pod", [], {}, {"metadata": None}, {"metadata": []}, {"metadata": "x"},
     {"metadata": {"annotations": ["a"], "labels": "x", "name": 5, "uid": None}}],
)
def test_malformed_objects_read_as_empty(obj: Any) -> None:
    assert (name_of(obj), uid_of(obj), meta_field(obj, "namespace")) == ("", "", "")
    assert annotations_of(obj) == {} and labels_of(obj) == {}


def test_metadata_that_is_not_a_mapping_is_empty() -> None:
    assert metadata_of({"metadata": ["name", "p"]}) == {} and metadata_of(None) == {}
    assert metadata_of(POD) is POD["metadata"]


def test_non_string_entries_are_skipped_and_the_object_is_left_alone() -> None:
    annos = {"keep": "v", "num": 7, "null": None, 3: "int-key", "obj": {"a": "b"}}
    obj = {"metadata": {"annotations": annos, "labels": {"l": True, "m": "ok"}}}
    assert annotations_of(obj) == {"keep": "v"}
    assert labels_of(obj) == {"m": "ok"}
    assert len(annos) == 5


@given(json_values)
def test_any_json_value_is_read_without_raising(value: Any) -> None:
    nested = {"metadata": {"annotations": value, "labels": value, "name": value}}
    for obj in (value, {"metadata": value}, nested):
        assert isinstance(name_of(obj), str)
        for found in (annotations_of(obj), labels_of(obj)):
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in found.items())
