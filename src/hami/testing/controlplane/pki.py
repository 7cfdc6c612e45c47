"""The control plane's certificates and kubeconfigs: one CA that signs kube-apiserver's serving
certificate and every client's (kubectl, kube-scheduler, the daemons), and the service-account
signing key. Kubernetes reads a client certificate's CN as the user and its O= as the groups."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from hami.testing import certs

ADMIN = "hami-admin"  # kubectl's user: group system:masters
KUBE_SCHEDULER = "system:kube-scheduler"  # the user the bootstrap RBAC role system:kube-scheduler binds
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's address in SERVICE_CIDR
SERVICE_CIDR = "10.96.0.0/16"
APISERVER_NAMES = (
    "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
)  # fmt: skip


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount's token authenticates as; RBAC bindings to the ServiceAccount
    match it, so a client certificate with this CN gets exactly the ServiceAccount's permissions."""
    return f"system:serviceaccount:{namespace}:{name}"


class PKI:
    """Files under ``directory``: ca.crt, apiserver.crt/.key, sa.key/.pub, and <user>.crt/.key."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca = certs.make_ca("hami-controlplane-ca")
        self.ca = self._ca.write(directory / "ca.crt")
        self.apiserver_cert, self.apiserver_key = directory / "apiserver.crt", directory / "apiserver.key"
        certs.issue(
            self._ca, "kube-apiserver", self.apiserver_cert, self.apiserver_key,
            dns=APISERVER_NAMES, ips=(SERVICE_IP,),
        )  # fmt: skip
        self.sa_key, self.sa_pub = directory / "sa.key", directory / "sa.pub"
        key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        self.sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def client(self, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
        """A client certificate (and key) for ``user`` in ``groups``, signed by the cluster CA."""
        stem = user.replace(":", "_")
        cert, key = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        certs.issue(self._ca, user, cert, key, organizations=groups)
        return cert, key

    def serving(self, name: str, dns: Sequence[str] = ()) -> tuple[Path, Path]:
        """A serving certificate from the cluster CA (valid for 127.0.0.1, localhost and ``dns``)."""
        cert, key = self.dir / f"{name}-serving.crt", self.dir / f"{name}-serving.key"
        certs.issue(self._ca, name, cert, key, dns=dns)
        return cert, key


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> dict[str, Any]:
    """A kubeconfig with one context: ``server`` checked against ``ca``, the client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hami", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "hami", "context": {"cluster": "hami", "user": user}}],
        "current-context": "hami",
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return path
