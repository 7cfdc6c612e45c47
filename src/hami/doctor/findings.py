"""What every check returns: findings with a severity, evidence and the fix the guides name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["ok", "info", "warning", "broken"]

OK: Severity = "ok"
# Worth knowing, nothing to act on now: shown with its evidence and fix, but a report of only ok and
# info findings is ok (exit 0), as no alert fires for it.
INFO: Severity = "info"
WARNING: Severity = "warning"
BROKEN: Severity = "broken"

_RANK: dict[Severity, int] = {OK: 0, INFO: 0, WARNING: 1, BROKEN: 2}

# Exit status of hami-doctor (documented in the package docstring and --help).
EXIT_OK = 0
EXIT_WARNING = 1
EXIT_BROKEN = 2
EXIT_USAGE = 3
EXIT_CLUSTER = 4


@dataclass(frozen=True)
class Remedy:
    """A write ``--fix`` may make: remove one node annotation if it still has the value we judged.

    ``expected`` guards against acting on a value that changed between the diagnosis and the fix.
    """

    node: str
    annotation: str
    expected: str
    description: str


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable id for scripts, e.g. "node.lock.expired"
    summary: str
    evidence: tuple[str, ...] = ()
    fix: str = ""
    remedy: Remedy | None = None


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass
class Section:
    """One subject (a pod, a node, a log stream) with its findings and tables."""

    title: str
    findings: list[Finding] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)

    @property
    def severity(self) -> Severity:
        return worst(f.severity for f in self.findings)


def worst(severities: Iterable[Severity]) -> Severity:
    result: Severity = OK
    for s in severities:
        if _RANK[s] > _RANK[result]:
            result = s
    return result


def exit_code(severity: Severity) -> int:
    return {OK: EXIT_OK, INFO: EXIT_OK, WARNING: EXIT_WARNING, BROKEN: EXIT_BROKEN}[severity]


def is_broken(findings: Iterable[Finding]) -> bool:
    return any(f.severity == BROKEN for f in findings)
