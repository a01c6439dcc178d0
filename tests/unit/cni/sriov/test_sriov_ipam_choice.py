# SPDX-License-Identifier: Apache-2.0
"""IPAM selection: ipamd for railyard/spiderpool, the spec's delegation otherwise."""

from __future__ import annotations

import sys

from cni.ipam.choose import choose_ipam
from cni.ipam.delegate import DelegateIpam
from ipamd.client import configured_endpoints


def ipamd_target(ipam: dict[str, object], env: dict[str, str]) -> str:
    client = choose_ipam({"name": "n", "ipam": {"type": "spiderpool", **ipam}}, env)
    assert client is not None
    try:
        return client.target  # type: ignore[attr-defined, no-any-return]
    finally:
        client.close()


def test_socket_comes_from_ipam_conf_then_env_then_default() -> None:
    env = {"RAILYARD_IPAMD_SOCKET": "/tmp/env.sock"}
    assert ipamd_target({"socket": "/tmp/conf.sock"}, env) == "/tmp/conf.sock"
    assert ipamd_target({}, env) == "/tmp/env.sock"
    # The default is resolved without looking at the machine's /run.
    assert configured_endpoints({}, {}) == ("/run/railyard/ipamd.sock",)


def test_spiderpools_own_socket_key_is_not_ours() -> None:
    conf = {"ipam_unix_socket_path": "/var/run/spidernet/spiderpool.sock"}
    assert configured_endpoints(conf, {}) == ("/run/railyard/ipamd.sock",)


def test_no_ipam_section_means_no_client() -> None:
    assert choose_ipam({"type": "sriov"}, {}) is None


def test_foreign_ipam_types_are_delegated_without_loading_grpc() -> None:
    before = "grpc" in sys.modules
    client = choose_ipam({"name": "n", "ipam": {"type": "host-local"}}, {})
    assert isinstance(client, DelegateIpam) and client.plugin_type == "host-local"
    assert ("grpc" in sys.modules) == before


def test_railyard_and_spiderpool_types_go_to_ipamd() -> None:
    from cni.ipam.grpc_client import IpamdClient

    for kind in ("railyard", "spiderpool"):
        client = choose_ipam(
            {"name": "n", "ipam": {"type": kind, "socket": "/tmp/rv-none.sock"}}, {}
        )
        assert isinstance(client, IpamdClient)
        assert client.target == "/tmp/rv-none.sock"
        client.close()
