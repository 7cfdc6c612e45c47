"""Test certificates generated with `cryptography`: a CA, and leaf certs (server or client) it signs."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path


def _name(cn: str, organizations: Sequence[str] = ()) -> x509.Name:
    orgs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*orgs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str = "hami-test-ca") -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CA(key, cert)


def issue(
    ca: CA,
    cn: str,
    cert_path: Path,
    key_path: Path,
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    organizations: Sequence[str] = (),
) -> x509.Certificate:
    """Write a leaf certificate for `cn` (also valid for 127.0.0.1/localhost, and for `dns` names and
    `ips`) and its key. `organizations` are the subject's O= (Kubernetes reads them as groups)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn, organizations)).issuer_name(ca.cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            *(x509.DNSName(d) for d in ("localhost", *dns)),
            *(x509.IPAddress(ipaddress.ip_address(i)) for i in ("127.0.0.1", *ips))]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


@dataclass(frozen=True)
class TlsFiles:
    """A server's certificate, a client's from the same CA, and a client's from another CA."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


def tls_files(directory: Path) -> TlsFiles:
    """Write a CA, a server certificate, a client certificate it signs, and a rogue client's."""
    ca, rogue_ca = make_ca(), make_ca("rogue-ca")
    issue(ca, "hami-scheduler", directory / "tls.crt", directory / "tls.key")
    issue(ca, "kube-scheduler", directory / "client.crt", directory / "client.key")
    issue(rogue_ca, "kube-scheduler", directory / "rogue.crt", directory / "rogue.key")
    return TlsFiles(
        ca.write(directory / "ca.crt"), directory / "tls.crt", directory / "tls.key",
        directory / "client.crt", directory / "client.key", directory / "rogue.crt", directory / "rogue.key",
    )
