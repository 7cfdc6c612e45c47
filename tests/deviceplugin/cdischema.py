"""The Container Device Interface spec document (CDI 0.5 to 0.8) as a JSON Schema (draft 2020-12),
written from the CDI specification, to check the specs the device plugin writes with ``jsonschema``.

What a runtime refuses is refused here: unknown top-level or device keys, a kind that is not
``vendor/class``, device names outside CDI's alphabet, a device node without ``path``, a mount
without both paths, a hook without ``hookName`` and ``path``, env entries that are not ``KEY=value``.
"""

from __future__ import annotations

from typing import Any

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_KIND = r"^[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]/[A-Za-z0-9][A-Za-z0-9_.-]*$"
_STRINGS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "CDI spec",
    "type": "object",
    "required": ["cdiVersion", "kind", "devices"],
    "additionalProperties": False,
    "properties": {
        "cdiVersion": {"type": "string", "pattern": r"^0\.[5-8]\.[0-9]+$"},
        "kind": {"type": "string", "pattern": _KIND},
        "annotations": {"$ref": "#/$defs/annotations"},
        "devices": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/device"}},
        "containerEdits": {"$ref": "#/$defs/containerEdits"},
    },
    "$defs": {
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "device": {
            "type": "object",
            "required": ["name", "containerEdits"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": _NAME},
                "annotations": {"$ref": "#/$defs/annotations"},
                "containerEdits": {"$ref": "#/$defs/containerEdits"},
            },
        },
        "containerEdits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "env": {"type": "array", "items": {"type": "string", "pattern": r"^[^=]+=.*$"}},
                "deviceNodes": {"type": "array", "items": {"$ref": "#/$defs/deviceNode"}},
                "mounts": {"type": "array", "items": {"$ref": "#/$defs/mount"}},
                "hooks": {"type": "array", "items": {"$ref": "#/$defs/hook"}},
                "additionalGids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "intelRdt": {"type": "object"},
                "netDevices": {"type": "array", "items": {"type": "object"}},
            },
        },
        "deviceNode": {
            "type": "object",
            "required": ["path"],
            "additionalProperties": False,
            "properties": {
                "path": {"type": "string", "pattern": "^/"},
                "hostPath": {"type": "string", "pattern": "^/"},
                "type": {"enum": ["b", "c", "u", "p"]},
                "major": {"type": "integer"},
                "minor": {"type": "integer"},
                "fileMode": {"type": "integer"},
                "permissions": {"type": "string", "pattern": "^[rwm]+$"},
                "uid": {"type": "integer", "minimum": 0},
                "gid": {"type": "integer", "minimum": 0},
            },
        },
        "mount": {
            "type": "object",
            "required": ["hostPath", "containerPath"],
            "additionalProperties": False,
            "properties": {
                "hostPath": {"type": "string"},
                "containerPath": {"type": "string", "pattern": "^/"},
                "options": _STRINGS,
                "type": {"type": "string"},
            },
        },
        "hook": {
            "type": "object",
            "required": ["hookName", "path"],
            "additionalProperties": False,
            "properties": {
                "hookName": {"type": "string"},
                "path": {"type": "string", "pattern": "^/"},
                "args": _STRINGS,
                "env": _STRINGS,
                "timeout": {"type": "integer", "minimum": 0},
            },
        },
    },
}
