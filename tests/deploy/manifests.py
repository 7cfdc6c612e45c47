"""This checkout's deploy/ for the tests (the Helm chart rendered with the production values, see
scripts/gen_deploy.py): every object of every file the kustomization lists, lookups, and each
container's command line read by the daemon's own argument parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hami.core import names
from hami.deviceplugin import main as deviceplugin_main
from hami.exporter import config as exporter_config
from hami.scheduler.extender import main as scheduler_main
from hami.testing import chart

ROOT = Path(__file__).resolve().parents[2]  # tests/deploy/manifests.py
DEPLOY = ROOT / "deploy"
NAMESPACE = names.NAMESPACE
Obj = dict[str, Any]

# Console script (pyproject [project.scripts]) -> the argparse parser that daemon really uses.
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "hami-monitor": exporter_config.build_parser,
    "hami-scheduler": scheduler_main.build_parser,
    "hami-device-plugin": deviceplugin_main.build_parser,
}


def resource_files() -> list[Path]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text(encoding="utf-8"))
    return [DEPLOY / name for name in kustomization["resources"]]


def objects() -> list[Obj]:
    out: list[Obj] = []
    for path in resource_files():
        out.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None)
    return out


def find(kind: str, name: str) -> Obj:
    return chart.find(objects(), kind, name)


def of_kind(kind: str) -> list[Obj]:
    return [o for o in objects() if o["kind"] == kind]


@dataclass(frozen=True)
class Container:
    workload: Obj
    spec: Obj

    @property
    def pod(self) -> Obj:
        pod: Obj = self.workload["spec"]["template"]["spec"]
        return pod

    @property
    def pod_labels(self) -> dict[str, str]:
        return dict(self.workload["spec"]["template"]["metadata"]["labels"])

    @property
    def program(self) -> str:
        return str(self.spec["command"][0])

    def args(self) -> argparse.Namespace:
        """command[1:] + args through the daemon's own parser (SystemExit on anything it rejects)."""
        argv = [*self.spec["command"][1:], *self.spec.get("args", [])]
        return PARSERS[self.program]().parse_args(argv)

    def port(self, ref: int | str) -> int:
        """A containerPort by number or name."""
        for p in self.spec.get("ports", []):
            if ref in (p["containerPort"], p.get("name")):
                return int(p["containerPort"])
        raise AssertionError(f"container {self.spec['name']} has no port {ref!r}")

    def env(self, name: str) -> Obj:
        for e in self.spec.get("env", []):
            if e["name"] == name:
                return dict(e)
        raise AssertionError(f"container {self.spec['name']} has no env {name}")

    def host_path_at(self, mount_path: str) -> str | None:
        """The hostPath mounted at ``mount_path`` in this container, if one is."""
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        for m in self.spec.get("volumeMounts", []):
            if m["mountPath"].rstrip("/") == mount_path.rstrip("/"):
                host = volumes[m["name"]].get("hostPath")
                return None if host is None else str(host["path"])
        return None

    def volume_at(self, mount_path: str) -> Obj:
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        for m in self.spec.get("volumeMounts", []):
            if m["mountPath"].rstrip("/") == mount_path.rstrip("/"):
                return dict(volumes[m["name"]])
        raise AssertionError(f"container {self.spec['name']} mounts nothing at {mount_path}")


def containers() -> Iterator[Container]:
    for o in objects():
        if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            for c in o["spec"]["template"]["spec"]["containers"]:
                yield Container(o, c)


def hami_container(program: str) -> Container:
    found = [c for c in containers() if c.spec.get("command", [None])[0] == program]
    assert len(found) == 1, f"expected one container running {program}, found {len(found)}"
    return found[0]


def bind_port(address: str) -> int:
    """The port of a ``host:port`` / ``:port`` listen address."""
    return int(address.rsplit(":", 1)[1])


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())
