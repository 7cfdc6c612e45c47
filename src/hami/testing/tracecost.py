"""The variants of a tracing-cost benchmark and its summary, shared by bench_extender.py and
bench_allocate.py (docs/design/tracing.md §2): tracing compiled out, off, and on at each ratio, in an
order that rotates every round so that a drift over the sitting lands on no one variant."""

from __future__ import annotations

from collections.abc import Iterator

Variant = tuple[str, float | None]  # (name, share of pods sampled; None: tracing not on)


def variants(ratios: list[float]) -> list[Variant]:
    return [("compiled out", None), ("off", None), *((f"on, {r:.0%} sampled", r) for r in ratios)]


def rotated(all_variants: list[Variant], round_index: int) -> Iterator[Variant]:
    """Round ``round_index``'s order: the list turned by one place a round."""
    k = round_index % len(all_variants)
    yield from all_variants[k:] + all_variants[:k]


def summary(what: str, unit: str, cpu: dict[str, list[float]], all_variants: list[Variant]) -> list[str]:
    """The lines a benchmark prints: each variant's mean and rounds (ms per ``unit``), off minus
    compiled out beside the rounds' own spread (the noise), and each ratio on / off."""

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    lines = []
    for name, _ in all_variants:
        runs = ", ".join(f"{v:.3f}" for v in cpu[name])
        lines.append(f"{what}, tracing {name}: mean {mean(cpu[name]):.3f} ms (rounds: {runs})")
    base, off = mean(cpu["compiled out"]), mean(cpu["off"])
    # how far one round of a variant lands from the next: the larger spread of the two
    spread = max((max(v) - min(v)) / mean(v) for v in (cpu["compiled out"], cpu["off"]))
    rounds = len(cpu["off"])
    lines.append(
        f"tracing off - compiled out: {(off - base) * 1000:+.1f} us per {unit} ({(off - base) / base:+.2%}); "
        f"round-to-round spread of either: {spread:.1%}" + ("" if rounds > 1 else " (one round: no spread)")
    )
    on = [name for name, ratio in all_variants if ratio is not None]  # a ratio of 0 is tracing on
    lines += [f"tracing {name} / off: {mean(cpu[name]) / off:.3f}x" for name in on]
    return lines
