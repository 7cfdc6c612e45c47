"""Every code of the reason catalogue (``hami.core.reasons``) makes the whole trip: the running extender
writes it in its FilteringFailed events and its -v=4 klog lines, and hami-doctor reads back the same
code, the same nodes and the same numbers, with the catalogue's one meaning and action."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami.core import klog
from hami.core import reasons as r
from hami.doctor import logscan
from hami.doctor.podinputs import PodCluster
from hami.doctor.podtree import diagnose_pod
from hami.doctor.settings import Settings
from hami.scheduler.engine.decision import FilterResult
from hami.scheduler.engine.requests import pod_request
from hami.scheduler.extender.daemon import Extender
from hami.testing.builders import gpu_node, pod, res
from hami.testing.extender import running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until

NODES = ("gpu-node-01", "gpu-node-02")
NODE_MEM_MIB, POD_MEM_MIB = 8000, 8192


@pytest.fixture(scope="module")
def extender() -> Iterator[tuple[KubeAPIServer, Extender]]:
    """One extender, the two nodes registered, for every code."""
    with KubeAPIServer() as api:
        for name in NODES:
            api.store.put(gpu_node(name, gpus=1, mem=NODE_MEM_MIB))
        with running(api) as ext:
            wait_until(lambda: all(n in ext.state.nodes for n in NODES), what="nodes registered")
            yield api, ext


def _failed_nodes(reason: r.Reason) -> dict[str, str]:
    """What Fit leaves in FailedNodes: ``<n>/<m> <Code>`` items, or the whole string."""
    text = reason.code if reason.form == r.WHOLE else r.gen_reason({reason.code: 1}, 4)
    return dict.fromkeys(NODES, text)


class _Lines(logging.Handler):
    """The klog lines the process writes, as the daemon's stderr would carry them."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(klog.KlogFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _extender_writes(ext: Extender, pod: dict[str, Any], failed: dict[str, str]) -> list[str]:
    """The extender's writes for a filter that ended with ``failed``, as ``FilterService`` makes them:
    its -v=4 verdict lines, then its events. Returns the klog lines."""
    request = pod_request(pod, ext.filters.config.nvidia)
    assert request is not None
    result = FilterResult(failed=failed)
    handler, previous, root = _Lines(), klog.verbosity(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # as klog.setup leaves it in the daemon
    klog.set_verbosity(4)
    try:
        with ext.state.lock:
            ext.filters.log_verdicts(request, list(NODES), result)
        ext.events.filtering(pod, result.events(len(NODES)), failed)
    finally:
        klog.set_verbosity(previous)
        root.setLevel(level)
        root.removeHandler(handler)
    assert ext.recorder.flush()
    return handler.lines


@pytest.mark.parametrize("reason", list(r.CATALOGUE.values()), ids=lambda reason: reason.code)
def test_every_code_survives_events_log_lines_and_the_doctor(
    extender: tuple[KubeAPIServer, Extender], reason: r.Reason
) -> None:
    api, ext = extender
    slug = reason.code.replace(" ", "-")
    settings = Settings()
    # As HAMi's webhook leaves it: the pod names the HAMi scheduler.
    name = f"p-{slug.lower()}"
    pending = api.store.put(pod(res(1, POD_MEM_MIB), name=name, scheduler=settings.scheduler_name))
    failed = _failed_nodes(reason)
    lines = _extender_writes(ext, pending, failed)

    # The event leg: hami-doctor pod walks the events the extender wrote.
    events = [e for e in api.store.list("events", "default") if e["involvedObject"]["name"] == name]
    messages = [e["message"] for e in events if e["reason"] == "FilteringFailed"]
    cluster = PodCluster(pod=pending, events=events, scheduler_pods=[])
    findings = {f.code: f for f in diagnose_pod(cluster, settings, datetime.now(UTC)).findings}
    if " " in reason.code:  # a failure text: HAMi records no per-reason event for it, nor do we
        assert not any(reason.code in m for m in messages), messages
        assert f"pod.filter.{slug}" not in findings
        assert r.parse_filter_messages(messages).nodes_not_fit == len(NODES)
    else:
        found = findings[f"pod.filter.{slug}"]
        assert found.summary == f"{reason.code} on {', '.join(NODES)}: {reason.meaning}"
        assert found.fix == reason.action

    # The log leg: hami-doctor logs reads the verdict lines the extender wrote.
    verdicts = [f for f in map(r.FILTERED_OUT.find, lines) if f is not None]
    assert [f["node"] for f in verdicts] == list(NODES), lines
    for fields in verdicts:
        assert r.verdict_codes(fields["codes"]) == [reason.code], fields
        if reason.code == r.CARD_INSUFFICIENT_MEMORY:  # memory says what it compared
            assert (fields["requested"], fields["free"]) == (str(POD_MEM_MIB), str(NODE_MEM_MIB)), fields
        else:
            assert fields["detail"] == "", fields
    hits = logscan.scan(lines).hits
    hit = hits[f"filtered-out:{slug}"]
    assert (hit.count, hit.meaning, hit.action) == (len(NODES), f"Filter: {reason.meaning}", reason.action)
    # HAMi's NodeUnfitPod line, for a registered node whose devices do not fit, carries the reason whole.
    unfit = [f for f in map(r.NODE_UNFIT.find, lines) if f is not None]
    if reason.code in (r.NODE_UNREGISTERED, r.NODE_USAGE_UNAVAILABLE):
        assert unfit == []
    else:
        assert [(f["code"], f["node"], f["reason"]) for f in unfit] == [
            (r.NODE_UNFIT_POD, node, failed[node]) for node in NODES
        ]


def test_the_doctor_reads_the_node_list_past_its_first_node() -> None:
    """The extender's ``Bindingfailed: <Code> on node a, b`` line names every node (the doctor's own
    pattern once read ``a,`` and dropped ``b``); past MAX_NODES_LISTED it says how many more."""
    nodes = [f"n{i}" for i in range(r.MAX_NODES_LISTED + 2)]
    failed = dict.fromkeys(nodes, r.gen_reason({r.CARD_CORDONED: 1}, 1))
    (line,) = r.node_list_messages(failed)
    assert line.endswith(" and 2 more")
    parsed = r.parse_filter_messages([line])
    assert parsed.by_reason == {r.CARD_CORDONED: nodes[: r.MAX_NODES_LISTED]}


_nodes = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
_WHOLE = sorted(code for code, reason in r.CATALOGUE.items() if reason.form == r.WHOLE)
_COUNTED = sorted(set(r.CATALOGUE) - set(_WHOLE))
# What Fit leaves for a node: a whole failure text, or <n>/<m> items.
_texts = st.one_of(
    st.sampled_from(_WHOLE),
    st.dictionaries(st.sampled_from(_COUNTED), st.integers(1, 8), min_size=1, max_size=4).map(
        lambda counts: r.gen_reason(counts, 8)
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_nodes, _texts, max_size=12))
def test_the_doctor_reads_back_what_the_scheduler_wrote(failed: dict[str, str]) -> None:
    """For any FailedNodes, the messages the scheduler writes read back as the nodes of each code (the
    first MAX_NODES_LISTED of a code that only the node list line names) and the node total."""
    messages = [*r.failure_events(failed), r.no_fit_message(len(failed)), *r.node_list_messages(failed)]
    parsed = r.parse_filter_messages(messages)
    counted: dict[str, set[str]] = {}  # named by HAMi's per-reason events
    whole: dict[str, list[str]] = {}  # named by the node list line only
    for node, text in sorted(failed.items()):
        for code in r.parse_reason(text):
            counted.setdefault(code, set()).add(node)
        if not r.parse_reason(text) and " " not in text:
            whole.setdefault(text, []).append(node)
    truth = {**{code: set(nodes[: r.MAX_NODES_LISTED]) for code, nodes in whole.items()}, **counted}
    assert parsed.nodes_not_fit == len(failed) and parsed.other == []
    assert {code: set(nodes) for code, nodes in parsed.by_reason.items()} == truth
    for node, text in failed.items():
        line = f"I0101 00:00:00.000000       1 filter_service.py:1] {r.filtered_out_line(node, text)}\n"
        fields = r.FILTERED_OUT.find(line)
        assert fields is not None and fields["node"] == node
        assert r.verdict_codes(fields["codes"]) == (list(r.parse_reason(text)) or [text])
