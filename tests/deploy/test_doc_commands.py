"""Every command a reader of docs/ or the README can copy names what the shipped chart installs.

deploy/ is the chart rendered with the production values (scripts/gen_deploy.py), so its objects are
the names a user's cluster has: every `kubectl` line of every page (guides, runbooks, design docs,
the deploy guide, the README; in code blocks, diagrams and inline code) must use its namespace, the
labels its pods carry, its containers, Deployments, DaemonSets and ConfigMaps, and container indexes
that exist; a command about one of its objects must say the namespace. Every repository file a page
names (`deploy/...`, `alerts/...`, `charts/...`) must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hami.core import annotations as ann
from tests.deploy import manifests as m

DOCS = sorted([*(m.ROOT / "docs").rglob("*.md"), m.ROOT / "README.md"])
# Labels the pods get at run time, not from the chart: the extender marks the leader and the others.
RUNTIME_LABELS = {ann.SCHEDULER_ROLE_LABEL: {"leader", "follower"}}
KINDS = {
    "deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
    "ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
    "cm": "ConfigMap", "configmap": "ConfigMap", "configmaps": "ConfigMap",
    "svc": "Service", "service": "Service",
}  # fmt: skip
KIND_REF = re.compile(
    rf"\b({'|'.join(KINDS)})(?:/| +(?:(?:-n|--namespace)[ =]\S+ +)?)([a-z][\w.-]*)(?![\w/.-])"
)
# `kubectl hami ...` (the doctor as a kubectl plugin): its -n is the namespace of the user's pod
PLUGIN = re.compile(r"kubectl(?:\s+(?:-n|--namespace|--context|--kubeconfig)[ =]\S+)*\s+hami\b")
NAMESPACE_FLAG = re.compile(r"(?:^|\s)(?:-n|--namespace)[ =]([^\s'\"]+)")
CONTAINER_FLAG = re.compile(r"(?:^|\s)(?:-c|--container)[ =]([^\s'\"]+)")
SELECTOR_FLAG = re.compile(r"(?:^|\s)(?:-l|--selector)[ =]('[^']*'|\"[^\"]*\"|[^\s'\"]+)")
CONTAINER_INDEX = re.compile(r"/spec/template/spec/containers/(\d+)/")
# A file of this repository as a page names it (not a path inside a container: those start with "/").
REPO_PATH = re.compile(
    r"(?<![\w/.:$~-])(?:deploy|alerts|charts|scripts|src|dashboards|bench|mixin|tests)/[\w./*<>-]*[\w*>/]"
)
PLACEHOLDER = re.compile(r"<[^>]*>|\b[A-Z][A-Z_]+\b")


def code_spans(text: str) -> list[str]:
    """Each line of a fenced block (a `\\` continuation joined to its next line), each inline span."""
    out: list[str] = []
    fenced, pending = False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if not fenced:
            out += re.findall(r"`([^`]+)`", line)
            continue
        joined = f"{pending} {line.strip()}" if pending else line.strip()
        if joined.endswith("\\"):
            pending = joined[:-1].rstrip()
            continue
        pending = ""
        out.append(joined)
    return out


def kubectl_segments(span: str) -> list[str]:
    """Each kubectl invocation of a shell line, up to its pipe, `;`, `&&` or closing `)`."""
    parts = re.split(r"\||;|&&|\$\(", span)
    # what follows `--` is the command run in the container (`exec POD -- sh -c ...`)
    return [p.split(")")[0].split(" -- ")[0] for p in parts if re.search(r"(?:^|\s|\")kubectl\s", p)]


def _placeholder(value: str) -> bool:
    return bool(PLACEHOLDER.search(value)) or value.startswith("$")


def _names(objs: list[dict[str, str]]) -> list[str]:
    return [o["name"] for o in objs]


class Chart:
    """What the rendered chart installs, as a command can name it."""

    def __init__(self) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]) for o in m.objects()}
        self.containers = {c.spec["name"] for c in m.containers()}
        self.pod_labels = [c.pod_labels for c in m.containers()]
        self.workload_containers = {
            (w["kind"], w["metadata"]["name"]): _names(w["spec"]["template"]["spec"]["containers"])
            for w in m.objects()
            if w["kind"] in ("Deployment", "DaemonSet")
        }

    def problems(self, segment: str) -> list[str]:
        out: list[str] = []
        refs = [(KINDS[kind], name) for kind, name in KIND_REF.findall(segment)]
        out += [f"no {kind} {name} in the chart" for kind, name in refs if (kind, name) not in self.objects]
        for ns in [] if PLUGIN.search(segment) else NAMESPACE_FLAG.findall(segment):
            if ns != m.NAMESPACE and not _placeholder(ns):
                out.append(f"namespace {ns}: the chart installs into {m.NAMESPACE}")
        for name in CONTAINER_FLAG.findall(segment):
            if name not in self.containers and not _placeholder(name):
                out.append(f"no container {name} (the chart's: {sorted(self.containers)})")
        selects_chart = False
        for selector in SELECTOR_FLAG.findall(segment):
            problem, ours = self._selector(selector.strip("'\""))
            selects_chart |= ours
            out += [problem] if problem else []
        for index in CONTAINER_INDEX.findall(segment):
            for ref in refs:
                containers = self.workload_containers.get(ref, [])
                if int(index) >= len(containers):
                    out.append(f"{ref[0]} {ref[1]} has no container {index} ({containers})")
        names_ours = selects_chart or any(ref in self.objects for ref in refs)
        scoped = NAMESPACE_FLAG.search(segment) or re.search(r"\s(?:-A|--all-namespaces)\b", segment)
        if names_ours and not scoped:
            out.append(f"names the chart's objects without -n {m.NAMESPACE}")
        return out

    def _selector(self, selector: str) -> tuple[str, bool]:
        """A problem with a label selector (or ""), and whether it selects the chart's pods."""
        wanted: dict[str, str] = {}
        for term in selector.split(","):
            key, eq, value = term.partition("=")
            if not eq or key.endswith("!") or _placeholder(term):
                continue
            value = value.removeprefix("=")
            if value in RUNTIME_LABELS.get(key, ()):
                continue
            wanted[key] = value
        if not wanted:
            return "", False
        if any(all(labels.get(k) == v for k, v in wanted.items()) for labels in self.pod_labels):
            return "", True
        return f"-l {selector} selects no pod of the chart", False


def repo_path_problems(span: str) -> list[str]:
    out = []
    for path in REPO_PATH.findall(span):
        resource = re.search(r"\b(?:deploy|ds|daemonset|deployment)/[a-z]", path)
        if resource and "." not in path.rsplit("/", 1)[-1]:
            continue  # deploy/NAME is a kubectl resource reference, not a file
        pattern = re.sub(r"<[^>]*>", "*", path)
        if not (any(m.ROOT.glob(pattern)) if "*" in pattern else (m.ROOT / pattern).exists()):
            out.append(f"{path} is not in the repository")
    return out


def _spans() -> list[tuple[Path, str]]:
    return [(doc, span) for doc in DOCS for span in code_spans(doc.read_text(encoding="utf-8"))]


def test_every_kubectl_command_in_the_docs_names_what_the_chart_installs() -> None:
    chart = Chart()
    checked, problems = 0, []
    for doc, span in _spans():
        for segment in kubectl_segments(span):
            checked += 1
            problems += [f"{doc.relative_to(m.ROOT)}: {segment!r}: {p}" for p in chart.problems(segment)]
    assert not problems, "\n".join(problems)
    assert checked >= 100, checked  # the guides, the runbooks, the deploy guide and the README


def test_every_repository_file_the_docs_name_exists() -> None:
    problems = [
        f"{doc.relative_to(m.ROOT)}: {p}"
        for doc in DOCS
        for span in [*code_spans(doc.read_text(encoding="utf-8"))]
        for p in repo_path_problems(span)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("kubectl -n hami-system logs deploy/hami-scheduler -c extender", "namespace hami-system"),
        ("kubectl -n kube-system logs deploy/hami-scheduler -c extender", "no container extender"),
        ("kubectl -n kube-system get pods -l app.kubernetes.io/name=hami-scheduler", "selects no pod"),
        ("kubectl -n kube-system get configmap hami-device-config", "no ConfigMap hami-device-config"),
        ("kubectl logs -l app=hami-scheduler --tail=100", "without -n kube-system"),
        (
            "kubectl -n kube-system patch deployment hami-scheduler --type=json "
            "-p='[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/2/args/-\", \"value\": 1}]'",
            "has no container 2",
        ),
    ],
)
def test_the_check_catches_the_removed_layout(line: str, problem: str) -> None:
    """The old kustomize layout's names, each refused (the checks above cannot pass vacuously)."""
    (segment,) = kubectl_segments(line)
    assert any(problem in p for p in Chart().problems(segment)), Chart().problems(segment)


def test_the_checks_pass_the_chart_names() -> None:
    line = (
        "kubectl -n kube-system logs -l app=hami-scheduler,hami.io/scheduler-role=leader "
        "-c vgpu-scheduler-extender --tail=200 | grep FilteringFailed"
    )
    assert Chart().problems(kubectl_segments(line)[0]) == []
    # the kubectl plugin's -n names the user's pod's namespace, a chart command's the chart's
    chart = Chart()
    assert chart.problems("kubectl hami pod train -n team-a") == []
    assert chart.problems("kubectl -n x hami pod p") == []
    assert chart.problems("kubectl -n team-a logs deploy/hami-scheduler") != []
    assert repo_path_problems("alerts/config.yaml and deploy/scheduler.yaml") == [
        "alerts/config.yaml is not in the repository", "deploy/scheduler.yaml is not in the repository"
    ]
    assert repo_path_problems("charts/hami/values.yaml, docs/runbooks/<alert>.md, dashboards/*.json") == []
