"""The three patch formats the API server accepts, as pure functions on JSON values.

- JSON merge patch (RFC 7386): objects merge recursively, `null` deletes, anything else replaces.
- JSON patch (RFC 6902): add / remove / replace / move / copy / test, JSON pointers with `~0`/`~1`
  escapes and `-` for "append".
- Strategic merge patch, the subset Kubernetes clients use on core objects:
  * objects merge like RFC 7386 (`null` deletes a key);
  * lists of objects with a known patch merge key merge element-wise by that key (`containers`,
    `initContainers`, `ephemeralContainers`, `volumes`, `env`, `imagePullSecrets` by `name`;
    `ports` by `containerPort`; `volumeMounts` by `mountPath`; `conditions`, `addresses` by `type`;
    `ownerReferences` by `uid`); new elements are appended; an element `{"$patch": "delete", <key>}`
    removes the match;
  * `finalizers` is a set-merged list of strings; `$deleteFromPrimitiveList/<field>` removes items;
  * `{"$patch": "replace"}` in an object replaces it instead of merging; `$setElementOrder/<field>`
    and `$retainKeys` are accepted and ignored (order is kept as stored);
  * every other list (tolerations, taints, args, ...) is replaced, as the real API does.
"""

from __future__ import annotations

import copy
from typing import Any

_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
}
_SET_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """The patch cannot be applied (bad document, failed `test`, missing path)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch, for the fields listed in the module docstring."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys", "$patch")):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            result[field] = [x for x in result.get(field) or [] if x not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    base = list(current) if isinstance(current, list) else []
    if field in _SET_LISTS:
        return base + [copy.deepcopy(x) for x in patch if x not in base]
    merge_key = _MERGE_KEYS.get(field)
    if merge_key is None or not all(isinstance(x, dict) for x in patch):
        return [copy.deepcopy(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    if len(patch) == 1 and patch[0].get("$patch") == "replace":
        return []
    for item in patch:
        if merge_key not in item:
            raise PatchError(f"map in {field} does not contain declared merge key {merge_key!r}")
        index = next((i for i, x in enumerate(base)
                      if isinstance(x, dict) and x.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del base[index]
        elif index is None:
            base.append(strategic_merge_patch({}, item))
        else:
            base[index] = strategic_merge_patch(base[index], item)
    return base


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split_pointer(pointer: Any) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise PatchError(f"invalid JSON pointer {pointer!r}")
    return [_unescape(t) for t in pointer.split("/")[1:]] if pointer else []


def _index(container: list[Any], token: str, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of range")
    return index


def _parent(doc: Any, tokens: list[str], pointer: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, False)]
        else:
            raise PatchError(f"path {pointer!r} does not exist")
    return node


def _get(doc: Any, pointer: str) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, pointer)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, False)]
    raise PatchError(f"path {pointer!r} does not exist")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        return value
    parent = _parent(doc, tokens, pointer)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], True), value)
    else:
        raise PatchError(f"path {pointer!r} does not exist")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, pointer)
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], False)]
    else:
        raise PatchError(f"unable to remove nonexistent key: {tokens[-1]}: missing value")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; raises `PatchError` (the whole patch is rejected, the target is not touched)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for n, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {n} must be an object with 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {n} ({kind}) has no 'value'")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, copy.deepcopy(op["value"])) if path else op["value"]
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                if path.startswith(op["from"] + "/"):
                    raise PatchError(f"cannot move {op['from']!r} into its own child {path!r}")
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unknown operation {kind!r}")
    return doc
