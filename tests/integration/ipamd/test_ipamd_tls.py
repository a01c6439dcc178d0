# SPDX-License-Identifier: Apache-2.0
"""TCP transport: TLS only, mutual TLS with a client CA; plain TCP is refused.

Certificates come from a throwaway CA made with the ``openssl`` CLI.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from cni.ipam import IpamError
from cni.ipam.grpc_client import IpamdClient
from ipamd.client import IpamdCallError
from ipamd.client import IpamdClient as Transport
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
    for name, cn, ext in (
        ("server", "ra-server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "ra-client", "extendedKeyUsage=clientAuth"),
        # A node's own certificate, named as kubelet client certificates are.
        ("node-a", "system:node:node-a", "extendedKeyUsage=clientAuth"),
    ):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={cn}",
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


def serve(pki: Path, mutual: bool, **more: Any):
    settings = Settings(
        db_url="memory",
        listen="127.0.0.1:0",
        tls_cert=pki / "server.crt",
        tls_key=pki / "server.key",
        client_ca=(pki / "ca.crt") if mutual else None,
        **more,
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


# --------------------------------------------------- ReconcileNode: who may


def _allocate_on(client: Transport, cid: str, node: str) -> None:
    from ipamd.api.v1 import ipam_pb2 as pb

    client.allocate(
        pb.AllocateRequest(
            network="rail1-net",
            container_id=cid,
            ifname="net1",
            node=node,
            ipv4_pools=["rail1"],
        )
    )


RAIL_POOL = """
apiVersion: spiderpool.spidernet.io/v2beta1
kind: SpiderIPPool
metadata: {name: rail1}
spec: {subnet: 172.16.11.0/24, ips: [172.16.11.1-172.16.11.9]}
"""


def _with_pool(client: Transport) -> Transport:
    from ipamd.api.v1 import ipam_pb2 as pb
    from ipamd.api.v1.version import API_VERSION

    client.stub.ApplyPools(
        pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=RAIL_POOL)
    )
    return client


def test_a_node_reconciles_its_own_allocations_with_its_certificate(pki: Path) -> None:
    d = serve(pki, mutual=True, node_reconcile_grace=0.0)
    node_a = {
        "tls_ca": pki / "ca.crt",
        "tls_cert": pki / "node-a.crt",
        "tls_key": pki / "node-a.key",
    }
    try:
        with _with_pool(Transport(d.address, timeout=5, **node_a)) as c:
            _allocate_on(c, "kept", "node-a")
            _allocate_on(c, "gone", "node-a")
            _allocate_on(c, "elsewhere", "node-b")
            reply = c.reconcile_node("node-a", [("kept", "net1")], ["rail1-net"])
            assert [a.container_id for a in reply.released] == ["gone"]
            with pytest.raises(IpamdCallError) as err:
                c.reconcile_node("node-b", [], ["rail1-net"])
            assert err.value.code is grpc.StatusCode.PERMISSION_DENIED
            assert "system:node:node-a" in err.value.describe()
        shared = {
            "tls_ca": pki / "ca.crt",
            "tls_cert": pki / "client.crt",
            "tls_key": pki / "client.key",
        }
        with Transport(d.address, timeout=5, **shared) as c:
            # A certificate every node shares names no node: refused.
            with pytest.raises(IpamdCallError) as err:
                c.reconcile_node("node-a", [], ["rail1-net"])
            assert err.value.code is grpc.StatusCode.PERMISSION_DENIED
            left = c.stub.ListAllocations(_list_request())
            assert sorted(a.container_id for a in left.allocations) == [
                "elsewhere",
                "kept",
            ]
    finally:
        d.stop(grace=None)


def test_tls_without_client_certificates_reconciles_nothing(pki: Path) -> None:
    d = serve(pki, mutual=False, node_reconcile_grace=0.0)
    try:
        with _with_pool(Transport(d.address, timeout=5, tls_ca=pki / "ca.crt")) as c:
            _allocate_on(c, "c1", "node-a")
            with pytest.raises(IpamdCallError) as err:
                c.reconcile_node("node-a", [], ["rail1-net"])
            assert err.value.code is grpc.StatusCode.PERMISSION_DENIED
    finally:
        d.stop(grace=None)


def test_the_unix_socket_may_reconcile_only_ipamds_own_node(tmp_path: Path) -> None:
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="i24-ipamd-"))
    d = build(
        Settings(
            db_url="memory",
            listen=str(short / "ipamd.sock"),
            node_name="node-a",
            node_reconcile_grace=0.0,
        )
    )
    try:
        with _with_pool(Transport(str(short / "ipamd.sock"), timeout=5)) as c:
            _allocate_on(c, "gone", "node-a")
            _allocate_on(c, "other", "node-b")
            with pytest.raises(IpamdCallError) as err:
                c.reconcile_node("node-b", [], ["rail1-net"])
            assert err.value.code is grpc.StatusCode.PERMISSION_DENIED
            reply = c.reconcile_node("node-a", [], ["rail1-net"])
            assert [a.container_id for a in reply.released] == ["gone"]
    finally:
        d.stop(grace=None)
        import shutil

        shutil.rmtree(short, ignore_errors=True)


def _list_request() -> Any:
    from ipamd.api.v1 import ipam_pb2 as pb
    from ipamd.api.v1.version import API_VERSION

    return pb.ListAllocationsRequest(client_version=API_VERSION)
