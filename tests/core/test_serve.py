import os
import re
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

import hami
from hami.core.serve import (
    Server,
    WebConfigError,
    build_info,
    load_web_config,
    parse_bind,
    serve_metrics,
    serve_wsgi,
)
from hami.testing.certs import issue, make_ca
from hami.testing.wait import wait_until


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("hami_test_events_total", "test counter", registry=reg).inc(3)
    return reg


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def test_parse_bind() -> None:
    assert parse_bind("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind("[::1]:9394") == ("::1", 9394)
    assert parse_bind(":9394")[1] == 9394
    for bad in ("9394", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_bind(bad)


def test_metrics_health_ready(registry: CollectorRegistry, servers: list[Server]) -> None:
    state = {"ready": (False, "pod informer not synced")}
    build_info("monitor", registry)
    srv = serve_metrics("127.0.0.1:0", registry, ready=lambda: state["ready"])
    servers.append(srv)

    r = requests.get(f"{srv.url}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    assert families["hami_test_events"].samples[0].value == 3
    (info,) = families["hami_build_info"].samples
    assert info.value == 1
    assert set(info.labels) == {"version", "revision", "branch", "pythonversion", "component"}
    assert info.labels["component"] == "monitor"
    assert "process_resident_memory_bytes" in families and "python_info" in families

    om = requests.get(f"{srv.url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10)
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")

    assert requests.get(f"{srv.url}/healthz", timeout=10).status_code == 200
    r = requests.get(f"{srv.url}/readyz", timeout=10)
    assert (r.status_code, r.text) == (503, "not ready: pod informer not synced\n")
    state["ready"] = (True, "")
    assert requests.get(f"{srv.url}/readyz", timeout=10).status_code == 200
    assert requests.get(f"{srv.url}/nope", timeout=10).status_code == 404
    # Profiling is off unless asked for.
    assert requests.get(f"{srv.url}/debug/pprof/", timeout=10).status_code == 404


def test_ready_check_that_raises_is_not_ready(registry: CollectorRegistry, servers: list[Server]) -> None:
    def broken() -> bool:
        raise RuntimeError("cache exploded")

    srv = serve_metrics("127.0.0.1:0", registry, ready=broken)
    servers.append(srv)
    r = requests.get(f"{srv.url}/readyz", timeout=10)
    assert r.status_code == 503 and "cache exploded" in r.text
    assert requests.get(f"{srv.url}/metrics", timeout=10).status_code == 200


def test_extra_app_serves_other_paths(registry: CollectorRegistry, servers: list[Server]) -> None:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"path": "' + environ["PATH_INFO"].encode() + b'"}']

    srv = serve_metrics("127.0.0.1:0", registry, extra_app=app)
    servers.append(srv)
    assert requests.post(f"{srv.url}/filter", timeout=10).json() == {"path": "/filter"}
    assert "hami_test_events_total" in requests.get(f"{srv.url}/metrics", timeout=10).text


def _path_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app " + environ["REQUEST_METHOD"].encode() + b" " + environ["PATH_INFO"].encode()]


def _echo(body: bytes) -> tuple[int, str, bytes]:
    return 201, "application/x-echo", body[::-1]


def test_direct_routes_answer_posts_within_the_body_limit(servers: list[Server]) -> None:
    srv = serve_wsgi("127.0.0.1:0", _path_app, direct={"/hot": _echo}, max_body=1000)
    servers.append(srv)
    r = requests.post(f"{srv.url}/hot", data=b"abc", timeout=10)
    assert (r.status_code, r.headers["Content-Type"], r.content) == (201, "application/x-echo", b"cba")
    chunked = requests.post(f"{srv.url}/hot", data=iter([b"ab", b"cd"]), timeout=10)
    assert chunked.content == b"dcba"
    # other methods and paths reach the app
    assert requests.get(f"{srv.url}/hot", timeout=10).text == "app GET /hot"
    assert requests.post(f"{srv.url}/cold", data=b"x", timeout=10).text == "app POST /cold"
    big = requests.post(f"{srv.url}/hot", data=b"x" * 1001, timeout=10)
    assert big.status_code == 413 and "limit 1000 bytes" in big.text


def test_basic_auth_guards_direct_routes(tmp_path: Path, servers: list[Server], password_hash: str) -> None:
    text = f"basic_auth_users: {{u: '{password_hash}'}}\n"
    config = load_web_config(write_config(tmp_path / "web.yml", text))
    srv = serve_wsgi("127.0.0.1:0", _path_app, web_config=config, direct={"/hot": _echo})
    servers.append(srv)
    assert requests.post(f"{srv.url}/hot", data=b"abc", timeout=10).status_code == 401
    # behind the check, the app answers the path itself
    r = requests.post(f"{srv.url}/hot", data=b"abc", auth=("u", "s3cret"), timeout=10)
    assert r.text == "app POST /hot"


def test_bind_conflict_raises_at_start(registry: CollectorRegistry, servers: list[Server]) -> None:
    srv = serve_metrics("127.0.0.1:0", registry)
    servers.append(srv)
    with pytest.raises(OSError):
        servers.append(serve_metrics(f"127.0.0.1:{srv.port}", registry))


@pytest.fixture(scope="module")
def password_hash() -> str:
    return bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def write_config(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_tls_and_basic_auth(tmp_path: Path, registry: CollectorRegistry, servers: list[Server],
                            password_hash: str) -> None:
    ca = make_ca()
    ca_file = ca.write(tmp_path / "ca.crt")
    issue(ca, "hami-monitor", tmp_path / "tls.crt", tmp_path / "tls.key")
    config = write_config(tmp_path / "web.yml", f"""
tls_server_config:
  cert_file: tls.crt
  key_file: tls.key
  min_version: TLS12
basic_auth_users:
  prometheus: '{password_hash}'
""")
    srv = serve_metrics("127.0.0.1:0", registry, web_config_file=config)
    servers.append(srv)
    assert srv.url.startswith("https://")
    url = f"{srv.url}/metrics"

    ok = requests.get(url, auth=("prometheus", "s3cret"), verify=str(ca_file), timeout=10)
    assert ok.status_code == 200
    # Twice: the second check comes from the cache of verified credentials.
    ok = requests.get(url, auth=("prometheus", "s3cret"), verify=str(ca_file), timeout=10)
    assert ok.status_code == 200
    for auth in [("prometheus", "wrong"), ("nobody", "s3cret"), None]:
        r = requests.get(url, auth=auth, verify=str(ca_file), timeout=10)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
    r = requests.get(url, headers={"Authorization": "Basic !!!notbase64"}, verify=str(ca_file), timeout=10)
    assert r.status_code == 401
    # Probes need no credentials.
    assert requests.get(f"{srv.url}/healthz", verify=str(ca_file), timeout=10).status_code == 200
    # Plain HTTP to the TLS port is refused, and so is an untrusted server certificate.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(url.replace("https://", "http://"), timeout=10)
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url, auth=("prometheus", "s3cret"), timeout=10)


def test_client_certificates_required(tmp_path: Path, registry: CollectorRegistry,
                                      servers: list[Server]) -> None:
    ca = make_ca()
    ca_file = ca.write(tmp_path / "ca.crt")
    issue(ca, "server", tmp_path / "tls.crt", tmp_path / "tls.key")
    issue(ca, "prometheus", tmp_path / "client.crt", tmp_path / "client.key")
    other = make_ca("other-ca")
    issue(other, "intruder", tmp_path / "bad.crt", tmp_path / "bad.key")
    config = write_config(tmp_path / "web.yml", f"""
tls_server_config:
  cert_file: {tmp_path}/tls.crt
  key_file: {tmp_path}/tls.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {ca_file}
""")
    srv = serve_metrics("127.0.0.1:0", registry, web_config_file=config)
    servers.append(srv)
    url = f"{srv.url}/metrics"
    client = (str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
    assert requests.get(url, cert=client, verify=str(ca_file), timeout=10).status_code == 200
    bad = (str(tmp_path / "bad.crt"), str(tmp_path / "bad.key"))
    for cert in (None, bad):
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url, cert=cert, verify=str(ca_file), timeout=10)


def served_certificate(srv: Server) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
            ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_certificate_reload(tmp_path: Path, registry: CollectorRegistry, servers: list[Server]) -> None:
    ca = make_ca()
    first = issue(ca, "first", tmp_path / "tls.crt", tmp_path / "tls.key")
    config = write_config(tmp_path / "web.yml",
                          "tls_server_config: {cert_file: tls.crt, key_file: tls.key}\n")
    srv = serve_metrics("127.0.0.1:0", registry, web_config_file=config)
    servers.append(srv)
    from cryptography.hazmat.primitives.serialization import Encoding
    assert served_certificate(srv) == first.public_bytes(Encoding.DER)

    # A half-written update (garbage certificate) keeps the old one in service.
    (tmp_path / "tls.crt").write_text("not a certificate", encoding="utf-8")
    assert served_certificate(srv) == first.public_bytes(Encoding.DER)

    second = issue(ca, "second", tmp_path / "tls.crt", tmp_path / "tls.key")
    st = os.stat(tmp_path / "tls.crt")  # make the change visible even on coarse-mtime filesystems
    os.utime(tmp_path / "tls.crt", ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    new = second.public_bytes(Encoding.DER)
    wait_until(lambda: served_certificate(srv) == new, 20.0, "the new certificate served")
    assert srv.tls is not None and srv.tls.reloads == 1


@pytest.mark.parametrize("text, message", [
    ("tls_server_config: [1, 2]\n", "must be a mapping"),
    ("tls_server_config: {cert_file: a.crt}\n", "cert_file and key_file are both required"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert}\n",
     "RequireAnyClientCert' is not supported"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: VerifyClientCertIfGiven}\n",
     "needs client_ca_file"),
    ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS14}\n", "min_version 'TLS14'"),
    ("tls_server_config: {cert_file: a, key_file: b, cipher_suites: [x]}\n",
     "unsupported key(s) cipher_suites"),
    ("basic_auth_users: {alice: plaintext}\n", "alice: not a bcrypt hash"),
    ("http_server_config: {http2: true}\n", "unsupported key(s) http_server_config"),
    ("tls_server_config: {cert_file: missing.crt, key_file: missing.key}\n", "No such file"),
    ("a: [unclosed\n", "invalid YAML"),
])
def test_invalid_web_config_is_a_clear_startup_error(tmp_path: Path, registry: CollectorRegistry,
                                                     text: str, message: str) -> None:
    config = write_config(tmp_path / "web.yml", text)
    with pytest.raises(WebConfigError) as err:
        load_web_config(config)
    assert message in str(err.value) and config in str(err.value)
    with pytest.raises(WebConfigError):
        serve_metrics("127.0.0.1:0", registry, web_config_file=config)


def test_empty_web_config_serves_plain_http(tmp_path: Path, servers: list[Server]) -> None:
    config = write_config(tmp_path / "web.yml", "")

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"hello"]

    srv = serve_wsgi("127.0.0.1:0", app, web_config_file=config)
    servers.append(srv)
    assert requests.get(f"{srv.url}/x", timeout=10).text == "hello"


def _hrefs(page: str) -> list[str]:
    return re.findall(r'<a href="([^"]+)"', page)


def test_root_is_a_landing_page_whose_every_link_opens(
    registry: CollectorRegistry, servers: list[Server]
) -> None:
    """A person who opens a daemon's bare address sees its name, version and endpoints (the
    exporter-toolkit's landing page), and every link on it answers."""
    srv = serve_metrics(
        "127.0.0.1:0", registry, name="hami-test", profiling=True, extra_app=_path_app,
        extra_links=[("/debug/decisions", "Scheduling decisions")],
    )
    servers.append(srv)
    got = requests.get(srv.url + "/", timeout=10)
    assert got.status_code == 200 and got.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "<h1>hami-test</h1>" in got.text and f"version {hami.__version__}" in got.text
    links = _hrefs(got.text)
    assert links == ["/metrics", "/healthz", "/readyz", "/debug/pprof/", "/debug/decisions"]
    for link in links:
        assert requests.get(srv.url + link, timeout=10).status_code == 200, link
    head = requests.head(srv.url + "/", timeout=10)
    assert head.status_code == 200 and head.content == b""
    # without profiling, no link to it
    plain = serve_metrics("127.0.0.1:0", registry)
    servers.append(plain)
    assert _hrefs(requests.get(plain.url, timeout=10).text) == ["/metrics", "/healthz", "/readyz"]


def test_basic_auth_guards_the_landing_page(tmp_path: Path, registry: CollectorRegistry,
                                            servers: list[Server], password_hash: str) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users: {{alice: '{password_hash}'}}\n", encoding="utf-8")
    srv = serve_metrics("127.0.0.1:0", registry, web_config_file=str(cfg))
    servers.append(srv)
    assert requests.get(srv.url + "/", timeout=10).status_code == 401
    assert requests.get(srv.url + "/", auth=("alice", "s3cret"), timeout=10).status_code == 200
