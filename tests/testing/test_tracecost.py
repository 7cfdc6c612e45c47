"""The tracing benchmarks' shared variants and summary (hami.testing.tracecost)."""

from __future__ import annotations

from hami.testing import tracecost


def test_every_round_runs_each_variant_once_and_the_first_place_rotates() -> None:
    variants = tracecost.variants([1.0, 0.0])
    assert [v for v in variants if v[1] is not None] == [("on, 100% sampled", 1.0), ("on, 0% sampled", 0.0)]
    orders = [list(tracecost.rotated(variants, i)) for i in range(len(variants))]
    assert all(sorted(order, key=str) == sorted(variants, key=str) for order in orders)
    assert [order[0] for order in orders] == variants


def test_summary_reports_the_difference_beside_the_spread_and_every_ratio() -> None:
    variants = tracecost.variants([0.0])
    cpu = {"compiled out": [2.0, 2.0], "off": [2.0, 3.0], "on, 0% sampled": [5.0, 5.0]}
    lines = tracecost.summary("CPU per pod", "pod", cpu, variants)
    assert lines[0] == "CPU per pod, tracing compiled out: mean 2.000 ms (rounds: 2.000, 2.000)"
    assert lines[3] == (
        "tracing off - compiled out: +500.0 us per pod (+25.00%); round-to-round spread of either: 40.0%"
    )
    assert lines[4] == "tracing on, 0% sampled / off: 2.000x"  # a ratio of 0 is still tracing on
