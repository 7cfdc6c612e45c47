"""The chart's scheduler pod, run as processes on loopback: kube-scheduler with the chart's
KubeSchedulerConfiguration and the extender with the chart's arguments, their mounted files (the TLS
Secrets, the device ConfigMap) laid out in a directory, and only addresses and mount paths changed.

    files = ChartFiles.write(pki, objects, workdir)     # /tls, /client-tls, /device-config
    config = scheduler_config(objects, extender_port, files)
    argv = extender_args(objects, files, http=..., webhook=..., metrics=...)
    secrets = files.secrets()                          # the Secrets the Deployment mounts
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from hami.core import names
from hami.testing.controlplane.pki import PKI

Obj = dict[str, Any]
SERVICE_DNS = f"{names.SCHEDULER_DEPLOYMENT}.{names.NAMESPACE}.svc"  # the extender's and webhook's name


def _find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"the rendered chart has {len(found)} {kind}/{name}")
    return found[0]


@dataclass(frozen=True)
class ChartFiles:
    """Mount path in the chart's pod -> the local directory holding the same files."""

    mounts: dict[str, Path]
    ca: Path

    @classmethod
    def write(cls, ca: PKI, objects: list[Obj], directory: Path) -> ChartFiles:
        """The serving Secret (extender and webhook, for ``SERVICE_DNS``), kube-scheduler's client
        Secret, both with the cluster CA as ca.crt, and the device ConfigMap's files."""
        mounts = {"/tls": directory / "tls", "/client-tls": directory / "client-tls"}
        mounts["/device-config"] = directory / "device-config"
        for d in mounts.values():
            d.mkdir(parents=True, exist_ok=True)
        pairs = {
            "/tls": ca.serving(names.SCHEDULER_DEPLOYMENT, dns=(SERVICE_DNS,)),
            "/client-tls": ca.client("kube-scheduler-extender-client"),
        }
        for mount, (cert, key) in pairs.items():
            (mounts[mount] / "tls.crt").write_bytes(cert.read_bytes())
            (mounts[mount] / "tls.key").write_bytes(key.read_bytes())
            (mounts[mount] / "ca.crt").write_bytes(ca.ca.read_bytes())
        device = _find(objects, "ConfigMap", names.DEVICE_CONFIGMAP)
        for key, text in device["data"].items():
            (mounts["/device-config"] / key).write_text(text, encoding="utf-8")
        return cls(mounts, ca.ca)

    def local(self, path: str) -> str:
        """``path`` inside the pod -> the same file here (unchanged when under no mount)."""
        for mount, local in self.mounts.items():
            if path.startswith(mount + "/"):
                return str(local / path.removeprefix(mount + "/"))
        return path

    def secrets(self) -> list[Obj]:
        """The TLS Secrets the chart's Deployment mounts (cert-manager's, when it issues them)."""
        out = []
        for mount, name in (("/tls", "-tls"), ("/client-tls", "-client-tls")):
            data = {
                f: base64.b64encode((self.mounts[mount] / f).read_bytes()).decode()
                for f in ("tls.crt", "tls.key", "ca.crt")
            }
            meta = {"name": names.SCHEDULER_DEPLOYMENT + name, "namespace": names.NAMESPACE}
            out.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "kubernetes.io/tls",
                        "data": data})  # fmt: skip
        return out

    def ca_bundle(self) -> str:
        """The webhook's caBundle, as cert-manager's CA injector writes it."""
        return base64.b64encode(self.ca.read_bytes()).decode()


def scheduler_config(objects: list[Obj], extender_port: int, files: ChartFiles) -> str:
    """The chart's KubeSchedulerConfiguration with the extender at 127.0.0.1:``extender_port`` (the
    chart's is 127.0.0.1:443 in the same pod) and its TLS files here; serverName and all else kept."""
    configmap = _find(objects, "ConfigMap", f"{names.SCHEDULER_DEPLOYMENT}-config")
    config: Obj = yaml.safe_load(configmap["data"]["config.yaml"])
    for extender in config.get("extenders") or []:
        url = urlsplit(extender["urlPrefix"])
        extender["urlPrefix"] = f"{url.scheme}://127.0.0.1:{extender_port}{url.path}"
        tls = extender.get("tlsConfig") or {}
        for key in ("caFile", "certFile", "keyFile"):
            if key in tls:
                tls[key] = files.local(tls[key])
    return yaml.safe_dump(config, sort_keys=False)


def with_kubeconfig(config_yaml: str, kubeconfig: Path) -> str:
    """``config_yaml`` with its client connection through ``kubeconfig`` (in the pod: in-cluster)."""
    config: Obj = yaml.safe_load(config_yaml)
    config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
    return yaml.safe_dump(config, sort_keys=False)


def extender_args(
    objects: list[Obj], files: ChartFiles, *, http: str, webhook: str, metrics: str
) -> list[str]:
    """The extender container's arguments from the chart's Deployment, with its listeners on the
    given loopback addresses and its mounted files here."""
    deployment = _find(objects, "Deployment", names.SCHEDULER_DEPLOYMENT)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == names.EXTENDER_CONTAINER]
    binds = {"--http_bind": http, "--webhook-bind": webhook, "--metrics-bind-address": metrics}
    out = []
    for arg in (str(a) for a in container.get("args") or []):
        flag, eq, value = arg.partition("=")
        if eq and flag in binds:
            out.append(f"{flag}={binds[flag]}")
        elif eq:
            out.append(f"{flag}={files.local(value)}")
        else:
            out.append(arg)
    return out
