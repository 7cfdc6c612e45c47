"""Label and field selectors, parsed the way the API server's query parameters are."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami.testing.kubeapi.errors import bad_request
from hami.testing.kubeapi.resources import ResourceType

Matcher = Callable[[Mapping[str, Any]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*(\S*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists, gt, lt
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if not present or not value.lstrip("-").isdigit():
            return False
        bound = int(next(iter(self.values)))
        return int(value) > bound if self.op == "gt" else int(value) < bound


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `( ... )` set values."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _check_value(value: str, selector: str) -> str:
    if not re.fullmatch(_VALUE, value) or len(value) > 63:
        raise bad_request(f"unable to parse requirement: invalid label value: {value!r} in {selector!r}")
    return value


def parse_label_selector(selector: str) -> list[Requirement]:
    """`a=b,c!=d,e in (f,g),h notin (i),j,!k,l>3` → requirements (all must hold)."""
    reqs: list[Requirement] = []
    for part in _split_top_level(selector):
        if m := _SET_RE.match(part):
            values = frozenset(_check_value(v.strip(), selector) for v in m.group(4).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(3), values))
        elif m := _CMP_RE.match(part):
            op = {"=": "in", "==": "in", "!=": "notin", ">": "gt", "<": "lt"}[m.group(3)]
            value = m.group(4)
            if op in ("gt", "lt") and not value.lstrip("-").isdigit():
                raise bad_request(f"unable to parse requirement: {value!r} is not an integer in {selector!r}")
            reqs.append(Requirement(m.group(1), op, frozenset({_check_value(value, selector)})))
        elif m := _EXISTS_RE.match(part):
            reqs.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists", frozenset()))
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r} in label selector {selector!r}")
    return reqs


def label_matcher(selector: str) -> Matcher:
    reqs = parse_label_selector(selector)

    def match(obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(labels) for r in reqs)

    return match


# Field labels whose value lives somewhere other than the dotted path they name.
_FIELD_ALIASES = {"source": "source.component"}


def field_value(obj: Mapping[str, Any], label: str, rtype: ResourceType) -> str:
    """The string a field selector compares: missing fields are "", booleans lower-case."""
    path = _FIELD_ALIASES.get(label, label)
    if rtype.group == "events.k8s.io" and path.startswith("involvedObject."):
        path = "regarding." + path.removeprefix("involvedObject.")
    if rtype.group == "events.k8s.io" and path == "source.component":
        path = "deprecatedSource.component"
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def field_matcher(selector: str, rtype: ResourceType) -> Matcher:
    """`metadata.name=x,spec.nodeName!=,status.phase==Running` for labels the resource allows."""
    allowed = {"metadata.name", "metadata.namespace", *rtype.fields}
    terms: list[tuple[str, bool, str]] = []
    for part in (p for p in selector.split(",") if p.strip()):
        m = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*", part)
        if not m:
            raise bad_request(f"invalid selector: {selector!r}; can't understand {part!r}")
        label, op, value = m.groups()
        if label not in allowed:
            raise bad_request(f'"{label}" is not a known field selector: only "{", ".join(sorted(allowed))}"')
        terms.append((label, op != "!=", value))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, label, rtype) == value) == eq for label, eq, value in terms)

    return match


def combined(rtype: ResourceType, label_selector: str, field_selector: str) -> Matcher:
    """One predicate for both selectors; raises `ApiError` 400 on a malformed selector."""
    checks: list[Matcher] = []
    if label_selector:
        checks.append(label_matcher(label_selector))
    if field_selector:
        checks.append(field_matcher(field_selector, rtype))
    return lambda obj: all(c(obj) for c in checks)


