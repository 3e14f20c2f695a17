"""A throwaway certificate authority and server certificate, for test servers' TLS.

Made with the openssl command line tool (on every Debian machine), valid for two days, for
127.0.0.1 and localhost. Used by the fake cluster and by the test registry.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """Write ca.crt, server.crt and server.key for 127.0.0.1/localhost; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / "ca.crt", directory / "server.crt", directory / "server.key")
    _with_openssl(directory, *paths)
    return paths


def _with_openssl(directory: Path, ca_path: Path, cert_path: Path, key_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("TLS needs the openssl command (apt-get install openssl).")
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
