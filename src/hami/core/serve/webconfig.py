"""Prometheus exporter-toolkit web-config: TLS and basic auth for every daemon's HTTP server.

The file (flag `--web.config.file`) is the exporter-toolkit format::

    tls_server_config:
      cert_file: /etc/hami/tls/tls.crt
      key_file: /etc/hami/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert   # NoClientCert (default), VerifyClientCertIfGiven
      client_ca_file: /etc/hami/tls/ca.crt
      min_version: TLS12                              # TLS10..TLS13; max_version likewise
    basic_auth_users:
      prometheus: $2y$10$...                          # bcrypt hash (htpasswd -B)

Unknown keys are errors (exporter-toolkit parses strictly too). `RequestClientCert` and
`RequireAnyClientCert` are rejected: Python's ssl module cannot accept a client certificate without
verifying it. Certificates are re-read when their files change (see `ReloadingTLS`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import bcrypt
import yaml

from hami.core import klog
from hami.core.serve.listener import DEFAULT_MAX_CONNECTIONS

log = klog.get_logger(__name__)

TLS_VERSIONS: Final = {
    "TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH: Final = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_KEYS: Final = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
                    "max_version")
_TOP_KEYS: Final = ("tls_server_config", "basic_auth_users")


class WebConfigError(ValueError):
    """The web-config file is unusable; `str()` names the file and the offending key."""


@dataclass(frozen=True)
class TLSConfig:
    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True)
class WebConfig:
    tls: TLSConfig | None = None
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_web_flags(parser: argparse.ArgumentParser) -> None:
    """``--web.config.file`` and ``--web.max-connections``, as Prometheus names them."""
    parser.add_argument(
        "--web.config.file", dest="web_config_file", default=None, metavar="PATH",
        help="exporter-toolkit web configuration YAML (TLS, basic auth)",
    )
    parser.add_argument(
        "--web.max-connections", dest="web_max_connections", type=_positive,
        default=DEFAULT_MAX_CONNECTIONS, metavar="N",
        help="connections each HTTP listener holds open at most; more are closed unread and counted "
             "in hami_http_connections_refused_total (default %(default)s)",
    )


def load_web_config(path: str) -> WebConfig:
    """Parse and validate the file; also loads the certificates once so errors show at start-up."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise WebConfigError(f"web config {path}: cannot read: {e}") from e
    except yaml.YAMLError as e:
        raise WebConfigError(f"web config {path}: invalid YAML: {e}") from e
    config = parse_web_config(raw, base_dir=os.path.dirname(os.path.abspath(path)), where=path)
    if config.tls is not None:
        try:
            build_context(config.tls)
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(f"web config {path}: tls_server_config: {e}") from e
    return config


def parse_web_config(raw: Any, base_dir: str = ".", where: str = "web config") -> WebConfig:
    """Validate the decoded YAML; relative file paths are resolved against `base_dir`."""
    if raw is None:
        return WebConfig()
    if not isinstance(raw, dict):
        raise WebConfigError(f"{where}: top level must be a mapping, got {type(raw).__name__}")
    _reject_unknown(raw, _TOP_KEYS, where)
    tls_raw = raw.get("tls_server_config")
    tls = _parse_tls(tls_raw, base_dir, f"{where}: tls_server_config") if tls_raw is not None else None
    users = _parse_users(raw.get("basic_auth_users"), f"{where}: basic_auth_users")
    return WebConfig(tls=tls, basic_auth_users=users)


def _reject_unknown(raw: dict[Any, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise WebConfigError(
            f"{where}: unsupported key(s) {', '.join(unknown)}; supported: {', '.join(known)}"
        )


def _parse_tls(raw: Any, base_dir: str, where: str) -> TLSConfig:
    if not isinstance(raw, dict):
        raise WebConfigError(f"{where}: must be a mapping")
    _reject_unknown(raw, _TLS_KEYS, where)
    for key in _TLS_KEYS:
        if key in raw and not isinstance(raw[key], str):
            raise WebConfigError(f"{where}: {key} must be a string, got {raw[key]!r}")
    if not raw.get("cert_file") or not raw.get("key_file"):
        raise WebConfigError(f"{where}: cert_file and key_file are both required")
    auth = raw.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(
            f"{where}: client_auth_type {auth!r} is not supported; use one of {', '.join(CLIENT_AUTH)}"
        )
    ca = raw.get("client_ca_file")
    if ca and auth == "NoClientCert":
        raise WebConfigError(f"{where}: client_ca_file is set but client_auth_type is NoClientCert")
    if not ca and auth != "NoClientCert":
        raise WebConfigError(f"{where}: client_auth_type {auth} needs client_ca_file")
    for key in ("min_version", "max_version"):
        if key in raw and raw[key] not in TLS_VERSIONS:
            raise WebConfigError(f"{where}: {key} {raw[key]!r} is not one of {', '.join(TLS_VERSIONS)}")

    def resolve(p: str) -> str:
        return os.path.join(base_dir, p)

    return TLSConfig(
        cert_file=resolve(raw["cert_file"]), key_file=resolve(raw["key_file"]),
        client_auth_type=auth, client_ca_file=resolve(ca) if ca else None,
        min_version=raw.get("min_version", "TLS12"), max_version=raw.get("max_version"),
    )


def _parse_users(raw: Any, where: str) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"{where}: must be a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not isinstance(hashed, str):
            raise WebConfigError(f"{where}: {user!r}: user and hash must be strings")
        if not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
            raise WebConfigError(f"{where}: {user}: not a bcrypt hash (expected $2a$/$2b$/$2y$, 60 chars)")
        users[user] = hashed.encode()
    return users


def build_context(tls: TLSConfig) -> ssl.SSLContext:
    """A server-side SSLContext for `tls` (reads the certificate files now)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    if tls.max_version:
        ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    ctx.verify_mode = CLIENT_AUTH[tls.client_auth_type]
    if tls.client_ca_file:
        ctx.load_verify_locations(cafile=tls.client_ca_file)
    return ctx


class ReloadingTLS:
    """Hands out an SSLContext, rebuilt when any of the TLS files' mtime or size changes.

    `context()` is called on every TLS handshake; it costs a few stat() calls. A broken update
    (e.g. a key written before its certificate) is logged once and the previous context kept.
    """

    def __init__(self, tls: TLSConfig) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._ctx = build_context(tls)
        self._failed_stamp: tuple[tuple[int, int], ...] | None = None
        self.reloads = 0

    def _files_stamp(self) -> tuple[tuple[int, int], ...]:
        paths = [self._tls.cert_file, self._tls.key_file]
        if self._tls.client_ca_file:
            paths.append(self._tls.client_ca_file)
        stamp = []
        for p in paths:
            try:
                st = os.stat(p)
                stamp.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamp.append((-1, -1))
        return tuple(stamp)

    def context(self) -> ssl.SSLContext:
        stamp = self._files_stamp()
        if stamp == self._stamp:
            return self._ctx
        with self._lock:
            if stamp not in (self._stamp, self._failed_stamp):
                try:
                    self._ctx = build_context(self._tls)
                except (OSError, ssl.SSLError) as e:
                    self._failed_stamp = stamp
                    log.warning("TLS certificate reload failed, keeping the previous one: %s", e)
                else:
                    self._stamp = stamp
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self._tls.cert_file)
            return self._ctx


MAX_PASSWORD_BYTES: Final = 72


class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes; successful checks are cached."""

    # A valid hash to compare against for unknown users, so they cost as much as known ones.
    _DUMMY: Final = bcrypt.hashpw(b"hami-unknown-user", bcrypt.gensalt(rounds=10))

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self._users = dict(users)
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()

    def check(self, user: str, password: str) -> bool:
        hashed = self._users.get(user)
        secret = password.encode()
        key = hashlib.sha256(b"\0".join((user.encode(), secret, hashed or b""))).digest()
        with self._lock:
            if hashed is not None and key in self._ok:
                return True
        if len(secret) > MAX_PASSWORD_BYTES:
            # bcrypt reads 72 bytes at most (the bcrypt package raises on more): such a password
            # matches no hash, as in Go's x/crypto/bcrypt; it costs the same time as any other.
            bcrypt.checkpw(secret[:MAX_PASSWORD_BYTES], self._DUMMY)
            return False
        ok = bcrypt.checkpw(secret, hashed if hashed is not None else self._DUMMY)
        if ok and hashed is not None:
            with self._lock:
                if len(self._ok) > 1024:
                    self._ok.clear()
                self._ok.add(key)
        return ok and hashed is not None
