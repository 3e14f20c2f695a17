"""A throwaway certificate authority and server certificate for the fake cluster's TLS.

Uses `cryptography` when it is installed, otherwise the `openssl` command line tool, so that
TLS works on machines with either.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import shutil
import subprocess
from pathlib import Path


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """Write ca.crt, server.crt and server.key for 127.0.0.1/localhost; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / "ca.crt", directory / "server.crt", directory / "server.key")
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _with_openssl(directory, *paths)
    else:
        _with_cryptography(*paths)
    return paths


def _with_cryptography(ca_path: Path, cert_path: Path, key_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = _dt.datetime.now(_dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8sjobs-fake-cluster-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(names, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(cert.public_bytes(pem))
    key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)


def _with_openssl(directory: Path, ca_path: Path, cert_path: Path, key_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError(
            "TLS needs either the cryptography package or the openssl command; "
            "install one, or start FakeCluster(tls=False)."
        )
    ca_key = directory / "ca.key"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_path),
        "-days",
        "2",
        "-subj",
        "/CN=k8sjobs-fake-cluster-ca",
    )
    csr = directory / "server.csr"
    run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        str(key_path),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_path),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert_path),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
