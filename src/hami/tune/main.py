"""hami-tune: read the Prometheus HTTP API and print tuning recommendations with their evidence.

`hami-tune report --since 7d --format csv` prints the chargeback report instead, and `hami-tune defrag`
which nodes to drain so that pending requests find a card (see --help there).

Every recommendation is computed over --window (default 7d) and refused, naming the window, while
Prometheus holds less history than that. Sections cited (tuning.md §N) are in docs/guides/tuning.md.

Exit status: 0 every parameter has a recommendation; 3 at least one was refused for missing data or
history; 1 Prometheus could not be queried; 2 bad arguments or an unreadable configuration file.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta

import yaml

from hami.core.duration import duration_flag, prometheus_duration_flag
from hami.core.promapi import PrometheusClient, PrometheusError
from hami.tune import chargeback, defrag, patch, report
from hami.tune.collect import Settings, recommend_all

EXIT_REFUSED = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hami-tune", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument(
        "--prometheus-url", required=True, help="base URL of Prometheus, e.g. http://localhost:9090"
    )
    p.add_argument(
        "--output",
        choices=("text", "json", "patch"),
        default="text",
        help="text (default), json, or patch: merge patches of the device configuration ConfigMaps",
    )
    p.add_argument("--json", action="store_true", help="same as --output json")
    p.add_argument(
        "--window",
        type=prometheus_duration_flag,  # it goes into PromQL range selectors as it is
        default="7d",
        help="history the peaks and rates are taken over, a Prometheus duration (default 7d)",
    )
    p.add_argument(
        "--device-config",
        type=argparse.FileType("r", encoding="utf-8"),
        help="with --output patch: the current device-config.yaml (kubectl -n hami-system get configmap "
        "hami-device-config -o jsonpath='{.data.device-config\\.yaml}')",
    )
    p.add_argument(
        "--node-config",
        type=argparse.FileType("r", encoding="utf-8"),
        help="with --output patch: the device plugin's current node config.json, for per-node scaling",
    )
    p.add_argument("--namespace", default="hami-system", help="namespace of the ConfigMaps (patch)")
    p.add_argument("--device-configmap", default="hami-device-config", help="device config ConfigMap (patch)")
    p.add_argument(
        "--node-configmap", default="hami-device-plugin-node-config", help="node config ConfigMap (patch)"
    )
    p.add_argument("--time", type=float, default=None, help="evaluation time, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    p.add_argument("--monitor-job", default="hami-monitor")
    p.add_argument("--scheduler-job", default="hami-scheduler")
    p.add_argument("--device-plugin-job", default="hami-device-plugin")
    p.add_argument(
        "--node-lock-expire",
        type=duration_flag(bare_seconds=True),
        default=timedelta(minutes=5),
        help="the scheduler's current --node-lock-timeout (a Go duration, or seconds), used only when the "
        "extender does not export hami_scheduler_node_lock_timeout_seconds (default 5m)",
    )
    return p


def _price(text: str) -> tuple[str, float]:
    model, sep, price = text.rpartition("=")
    try:
        value = float(price)
    except ValueError:
        value = -1.0
    if not sep or not model or not value >= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give MODEL=PRICE, a GPU model as the device_type label names it and a price per "
            "card-hour >= 0, e.g. NVIDIA-A100=2.5"
        )
    return model, value


def build_report_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hami-tune report",
        description=chargeback.__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--prometheus-url", required=True, help="base URL of Prometheus")
    p.add_argument(
        "--since",
        type=prometheus_duration_flag,
        default="7d",
        help="the window that ends at --time, a Prometheus duration (default 7d)",
    )
    p.add_argument(
        "--step",
        type=duration_flag(bare_seconds=True),
        default=timedelta(minutes=1),
        help="integration step, a Go duration or seconds; at most the rules' evaluation interval "
        "(default 1m)",
    )
    p.add_argument("--format", choices=("text", "csv"), default="text")
    p.add_argument(
        "--price",
        type=_price,
        action="append",
        default=[],
        metavar="MODEL=PRICE",
        help="price of one card-hour of a GPU model (repeatable); adds the cost columns",
    )
    p.add_argument("--time", type=float, default=None, help="end of the window, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=60.0, help="HTTP timeout per query, seconds")
    return p


def report_main(argv: list[str]) -> int:
    p = build_report_parser()
    args = p.parse_args(argv)
    step_s = int(args.step.total_seconds())
    if step_s < 1:
        p.error(f"--step {args.step}: must be at least 1s")
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        rows = chargeback.collect(client.query, args.since, step_s, dict(args.price))
    except PrometheusError as exc:
        print(f"hami-tune report: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if not rows:
        print(
            "hami-tune report: no chargeback series in the window; load alerts/hami-rules.yaml into "
            "Prometheus (group hami-chargeback.rules), or backfill them with "
            "`promtool tsdb create-blocks-from rules`",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    print(chargeback.to_csv(rows) if args.format == "csv" else chargeback.to_text(rows), end="")
    return 0


def defrag_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="hami-tune defrag", description=defrag.__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--prometheus-url", required=True, help="base URL of Prometheus")
    p.add_argument("--scheduler-job", default="hami-scheduler")
    p.add_argument("--ksm-selector", default='job="kube-state-metrics"', help="kube-state-metrics' series")
    p.add_argument("--time", type=float, default=None, help="evaluation time, unix seconds (default: now)")
    p.add_argument("--timeout", type=float, default=30.0, help="HTTP timeout per query, seconds")
    args = p.parse_args(argv)
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        cards, tenants, pending = defrag.collect(client.query, args.scheduler_job, args.ksm_selector)
    except PrometheusError as exc:
        print(f"hami-tune defrag: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if not cards:
        print(f'hami-tune defrag: no hami_gpu_memory_limit_bytes{{job="{args.scheduler_job}"}}: is the '
              "scheduler scraped under that job (--scheduler-job)?", file=sys.stderr)  # fmt: skip
        return EXIT_REFUSED
    result = defrag.plan(cards, tenants, pending)
    print(defrag.to_text(result), end="")
    return EXIT_REFUSED if result.unserved else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    if argv[:1] == ["defrag"]:
        return defrag_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    output = "json" if args.json else args.output
    if output == "patch" and args.device_config is None:
        parser.error("--output patch needs --device-config FILE: the patch carries the whole device config")
    settings = Settings(
        window=args.window,
        monitor_job=args.monitor_job,
        scheduler_job=args.scheduler_job,
        deviceplugin_job=args.device_plugin_job,
        node_lock_expire_seconds=args.node_lock_expire.total_seconds(),
    )
    client = PrometheusClient(args.prometheus_url, timeout=args.timeout, at=args.time)
    try:
        recs = recommend_all(client.query, settings)
    except PrometheusError as exc:
        print(f"hami-tune: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if output == "json":
        meta = {
            "prometheus_url": args.prometheus_url,
            "time": args.time if args.time is not None else time.time(),
            "window": args.window,
        }
        print(report.to_json(recs, meta))
    elif output == "patch":
        node_config = args.node_config.read() if args.node_config is not None else None
        names = (args.namespace, args.device_configmap, args.node_configmap)
        try:
            print(patch.render(recs, args.device_config.read(), node_config, names), end="")
        except (patch.PatchError, ValueError, yaml.YAMLError) as exc:
            print(f"hami-tune: cannot patch the configuration: {exc}", file=sys.stderr)
            return 2
    else:
        print(report.to_text(recs), end="")
    return EXIT_REFUSED if any(r.refused for r in recs) else 0
