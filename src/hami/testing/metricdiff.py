"""Two Prometheus expositions of the same state compared family by family: every family of the
reference (HAMi's) must be in the other (ours) with the same name, type and label names, and the same
value for every label set. Extra families on our side are fine. Pure: texts in, findings out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    name: str
    type: str
    label_names: frozenset[str]
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)


def families(text: str, keep: Callable[[str], bool] = lambda _n: True) -> dict[str, Family]:
    """Families by their exposed name (a counter's with ``_total``, as /metrics shows it)."""
    out: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name + ("_total" if fam.type == "counter" else "")
        if not keep(name):
            continue
        f = out.setdefault(name, Family(name, fam.type, frozenset()))
        for s in fam.samples:
            labels = tuple(sorted(s.labels.items()))
            f.samples[(s.name, labels)] = s.value
            f.label_names = f.label_names | {k for k in s.labels if k not in {"le", "quantile"}}
    return out


@dataclass(frozen=True)
class Row:
    """One family of the reference: ``status`` is ``same``, ``missing``, ``type``, ``labels`` or
    ``values``; ``detail`` says what differs."""

    name: str
    type: str
    labels: str
    status: str
    detail: str = ""


def compare(reference: Mapping[str, Family], ours: Mapping[str, Family],
            ignore_labels: Iterable[str] = ()) -> list[Row]:  # fmt: skip
    """A row per reference family, sorted by name. Samples are compared on the label names both have
    minus ``ignore_labels`` (labels that name the process, like a host name)."""
    skip = frozenset(ignore_labels)
    rows = []
    for name in sorted(reference):
        ref = reference[name]
        labels = ",".join(sorted(ref.label_names))
        got = ours.get(name)
        if got is None:
            rows.append(Row(name, ref.type, labels, "missing"))
            continue
        if got.type != ref.type:
            rows.append(Row(name, ref.type, labels, "type", f"ours is a {got.type}"))
            continue
        if got.label_names != ref.label_names and ref.samples:
            extra = sorted(got.label_names - ref.label_names)
            lacking = sorted(ref.label_names - got.label_names)
            rows.append(Row(name, ref.type, labels, "labels", f"ours adds {extra}, lacks {lacking}"))
            continue
        want, have = _values(ref, skip), _values(got, skip)
        if want != have:
            only_ref = sorted(set(want.items()) - set(have.items()))[:3]
            only_ours = sorted(set(have.items()) - set(want.items()))[:3]
            rows.append(Row(name, ref.type, labels, "values", f"HAMi only {only_ref}; ours only {only_ours}"))
            continue
        rows.append(Row(name, ref.type, labels, "same", f"{len(want)} samples"))
    return rows


def _values(f: Family, skip: frozenset[str]) -> dict[tuple[str, Labels], float]:
    return {(n, tuple(kv for kv in labels if kv[0] not in skip)): v for (n, labels), v in f.samples.items()}


def table(rows: Iterable[Row]) -> str:
    lines = ["| family | type | labels | ours |", "|---|---|---|---|"]
    lines += [f"| `{r.name}` | {r.type} | {r.labels} | {r.status}{': ' + r.detail if r.detail else ''} |"
              for r in rows]  # fmt: skip
    return "\n".join(lines)
