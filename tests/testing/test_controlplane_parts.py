"""The control plane's parts that need no binaries: the generated go.mod, the cache, the clear
errors, the chart's scheduler configuration and extender arguments, the egress proxy."""

from __future__ import annotations

import os
import socket
import socketserver
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.core import names
from hami.scheduler.extender.main import build_parser
from hami.testing import chart
from hami.testing.controlplane import build, schedconfig
from hami.testing.controlplane.deploy import PROVIDED_TLS
from hami.testing.controlplane.egress import EgressProxy, egress_config
from hami.testing.controlplane.pki import PKI


def test_go_mod_requires_the_pins_and_replaces_every_staging_module_once() -> None:
    text = build.go_mod()
    assert f"\tk8s.io/kubernetes {build.K8S_VERSION}\n" in text
    assert f"\tgo.etcd.io/etcd/server/v3 {build.ETCD_VERSION}\n" in text
    replaced = [line.split()[0] for line in text.splitlines() if "=>" in line]
    assert len(replaced) == len(set(replaced)) == len(build.STAGING)
    assert all(line.endswith(build.STAGING_VERSION) for line in text.splitlines() if "=>" in line)
    assert f"gitVersion={build.K8S_VERSION}" in build.ldflags()


def test_cached_binaries_are_reused_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_CONTROL_PLANE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "")
    assert build.cached() is None
    bin_dir = build.cache_dir() / "bin"
    bin_dir.mkdir(parents=True)
    for name in build.BINARIES:
        (bin_dir / name).write_text("#!/bin/sh\n", encoding="utf-8")
        (bin_dir / name).chmod(stat.S_IRWXU)
    assert build.cached() is None  # not complete until the marker is written
    (bin_dir / ".complete").write_text("done\n", encoding="utf-8")
    assert build.ensure(progress=lambda _: None).kubectl == bin_dir / "kubectl"


def test_no_go_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_CONTROL_PLANE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(build.os, "access", lambda *_: False)  # nor /usr/local/go
    with pytest.raises(build.BuildError, match=r"no Go toolchain.*go\.dev/dl"):
        build.ensure(progress=lambda _: None)


def test_an_old_go_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go1.19.8\n", encoding="utf-8")
    fake.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    real_access = os.access  # and no /usr/local/go
    mine = str(tmp_path)
    monkeypatch.setattr(build.os, "access", lambda p, m: str(p).startswith(mine) and real_access(p, m))
    with pytest.raises(build.BuildError, match=r"is go1\.19\.8; k8s\.io/kubernetes .* needs Go 1\.26"):
        build.find_go()


Rendered = tuple[list[dict[str, Any]], schedconfig.ChartFiles]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    objects = chart.render([], [PROVIDED_TLS])
    work = tmp_path_factory.mktemp("chartfiles")
    return objects, schedconfig.ChartFiles.write(PKI(work / "pki"), objects, work)


def test_the_charts_scheduler_configuration_points_at_the_local_extender(
    rendered: Rendered,
) -> None:
    objects, files = rendered
    config = yaml.safe_load(schedconfig.scheduler_config(objects, 4443, files))
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:4443"
    tls = extender["tlsConfig"]
    assert tls["serverName"] == schedconfig.SERVICE_DNS  # the chart's, unchanged
    assert Path(tls["caFile"]).read_bytes() == files.ca.read_bytes()
    assert Path(tls["certFile"]).exists() and Path(tls["keyFile"]).exists()
    assert [p["schedulerName"] for p in config["profiles"]] == ["hami-scheduler"]


def test_the_extender_runs_with_the_deployments_arguments(
    rendered: Rendered,
) -> None:
    objects, files = rendered
    binds = {"http": "127.0.0.1:1", "webhook": "127.0.0.1:2", "metrics": "127.0.0.1:3"}
    args = schedconfig.extender_args(objects, files, **binds)
    parsed = build_parser().parse_args(args)
    assert (parsed.http_bind, parsed.webhook_bind) == ("127.0.0.1:1", "127.0.0.1:2")
    assert Path(parsed.cert_file).exists() and Path(parsed.client_ca_file).exists()
    device = next(o for o in objects if o["metadata"]["name"] == names.DEVICE_CONFIGMAP)
    written = Path(parsed.device_config_file).read_text(encoding="utf-8")
    assert written == device["data"][names.DEVICE_CONFIG_KEY]
    secrets = files.secrets()
    assert [s["metadata"]["name"] for s in secrets] == ["hami-scheduler-tls", "hami-scheduler-client-tls"]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _connect(path: Path, target: str) -> tuple[socket.socket, bytes]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(5)
    conn.connect(str(path))
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(1)
    return conn, head


def test_the_egress_proxy_connects_routed_targets_only(tmp_path: Path, echo: int) -> None:
    proxy = EgressProxy(tmp_path / "egress.sock")
    try:
        assert f"udsName: {tmp_path / 'egress.sock'}" in egress_config(proxy.path)
        proxy.route("10.96.0.42:443", echo)
        conn, head = _connect(proxy.path, "10.96.0.42:443")
        assert head.startswith(b"HTTP/1.1 200")
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        conn.close()
        refused, head = _connect(proxy.path, "10.96.0.43:443")
        assert head.startswith(b"HTTP/1.1 502")
        refused.close()
    finally:
        proxy.stop()


def test_an_unreachable_proxy_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_CONTROL_PLANE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "mod"))  # nothing downloaded yet
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("GOSUMDB", "off")
    unreachable = r"go mod tidy .* the Go module proxy cannot be reached \(GOPROXY=http://127\.0\.0\.1:1\)"
    with pytest.raises(build.BuildError, match=unreachable):
        build.ensure(progress=lambda _: None)
    assert build.cached() is None
