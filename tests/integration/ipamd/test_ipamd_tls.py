# SPDX-License-Identifier: Apache-2.0
"""TCP transport: TLS only, mutual TLS with a client CA; plain TCP is refused.

Certificates come from a throwaway CA made with the ``openssl`` CLI.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cni.ipam import IpamError
from cni.ipam.grpc_client import IpamdClient
from ipamd.server import ConfigError, build
from ipamd.settings import Settings

pytestmark = pytest.mark.integration


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=ra-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=d,
    )
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN=ra-{name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    # A second CA whose client certificate the server must not accept.
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=ra-rogue",
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.crt",
        cwd=d,
    )
    return d


def serve(pki: Path, mutual: bool):
    settings = Settings(
        db_url="memory",
        listen="127.0.0.1:0",
        tls_cert=pki / "server.crt",
        tls_key=pki / "server.key",
        client_ca=(pki / "ca.crt") if mutual else None,
    )
    return build(settings)


def test_tls_client_trusting_the_ca_is_served(pki: Path) -> None:
    d = serve(pki, mutual=False)
    try:
        with IpamdClient(d.address, timeout=5, tls_ca=pki / "ca.crt") as c:
            c.status()
        with IpamdClient(d.address, timeout=5, tls_ca=pki / "rogue.crt") as c:
            with pytest.raises(IpamError) as err:
                c.status()
            assert err.value.code == 50
    finally:
        d.stop(grace=None)


def test_mutual_tls_refuses_clients_without_a_trusted_certificate(pki: Path) -> None:
    d = serve(pki, mutual=True)
    try:
        with IpamdClient(
            d.address,
            timeout=5,
            tls_ca=pki / "ca.crt",
            tls_cert=pki / "client.crt",
            tls_key=pki / "client.key",
        ) as c:
            c.status()
        with IpamdClient(d.address, timeout=5, tls_ca=pki / "ca.crt") as c:
            with pytest.raises(IpamError):
                c.status()
        with IpamdClient(
            d.address,
            timeout=5,
            tls_ca=pki / "ca.crt",
            tls_cert=pki / "rogue.crt",
            tls_key=pki / "rogue.key",
        ) as c:
            with pytest.raises(IpamError):
                c.status()
    finally:
        d.stop(grace=None)


def test_plugin_netconf_reaches_a_central_mutual_tls_daemon(pki: Path) -> None:
    """A node's plugins name the central ipamd and their PEM files in ``ipam``
    (or once per node in RAILYARD_IPAMD_TLS_*), and are served over mTLS."""
    d = serve(pki, mutual=True)
    try:
        conf = {
            "ipam": {
                "type": "railyard",
                "socket": d.address,
                "tls_ca": str(pki / "ca.crt"),
                "tls_cert": str(pki / "client.crt"),
                "tls_key": str(pki / "client.key"),
            }
        }
        with IpamdClient.from_netconf(conf, {}) as c:
            c.status()
        env = {
            "RAILYARD_IPAMD_SOCKET": d.address,
            "RAILYARD_IPAMD_TLS_CA": str(pki / "ca.crt"),
            "RAILYARD_IPAMD_TLS_CERT": str(pki / "client.crt"),
            "RAILYARD_IPAMD_TLS_KEY": str(pki / "client.key"),
        }
        with IpamdClient.from_netconf({"ipam": {"type": "spiderpool"}}, env) as c:
            c.status()
        no_cert = {"ipam": {"socket": d.address, "tls_ca": str(pki / "ca.crt")}}
        with IpamdClient.from_netconf(no_cert, {}) as c:
            with pytest.raises(IpamError):
                c.status()
    finally:
        d.stop(grace=None)


def test_plain_tcp_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs --tls-cert and --tls-key"):
        build(Settings(db_url="memory", listen="127.0.0.1:0"))


def test_admin_cli_reaches_a_mutual_tls_daemon(pki: Path) -> None:
    import json

    from click.testing import CliRunner

    from ipamd.cli import main

    d = serve(pki, mutual=True)
    try:
        args = [
            "status",
            "--json",
            "--socket",
            d.address,
            "--tls-ca",
            str(pki / "ca.crt"),
        ]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and "UNAVAILABLE" in res.output
        res = CliRunner().invoke(
            main,
            [
                *args,
                "--tls-cert",
                str(pki / "client.crt"),
                "--tls-key",
                str(pki / "client.key"),
            ],
        )
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["ready"] is True
    finally:
        d.stop(grace=None)
