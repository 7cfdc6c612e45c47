"""docs/design/differences.md: every module a row names exists, and the differences issue 33 asked to
write down have their rows (each was said in one guide only, or nowhere)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs/design/differences.md"


def rows() -> list[list[str]]:
    out = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| difference") and not line.startswith("|---"):
            out.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return out


def test_every_row_names_modules_that_exist() -> None:
    named = 0
    for row in rows():
        for ref in re.findall(r"`(hami\.[a-z_.]+)`", row[-1]):
            importlib.import_module(ref)
            named += 1
        for ref in re.findall(r"`\.([a-z_]+)`", row[-1]):
            assert re.search(r"`hami\.[a-z_.]+`", row[-1]), (ref, row[0])
    assert named > 50


@pytest.mark.parametrize(
    ("topic", "words"),
    [
        ("`gpucores` above 100", ("clamps to 100", "GPUCoresClamped", "gpucores_clamped_total", "once per")),
        ("`gpumem-percentage` above 100", ("GenerateResourceRequests", "PercentageClamped", "clamps it")),
        ("A bind without this replica's in-memory", ("no device reservation", "filters it again")),
        ("`NodeUnfitPod`", ("-v=4", "node unregistered")),
        ("The `hami.io/vgpu-node` pod label", ("Binding", "--vgpu-node-label", "HAMi's vGPU monitor")),
        ("Who writes the handshake", ("scheduler", "Requesting_")),
        ("`hami.io/node-nvidia-assume`", ("no such annotation",)),
        ("The hook path inside a container", ("/usr/local/vgpu/",)),
    ],
)
def test_the_rows_issue_33_asked_for(topic: str, words: tuple[str, ...]) -> None:
    (row,) = [r for r in rows() if r[0].startswith(topic)]
    text = " | ".join(row)
    for word in words:
        assert word in text, (topic, word)
