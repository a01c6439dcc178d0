# SPDX-License-Identifier: Apache-2.0
"""railyard-ipam, the CNI IPAM plugin, run in-process against a real ipamd."""

from __future__ import annotations

import io
import json

from cni.plugins.ipam import commands
from cni.skel import run_plugin


def netconf(socket_path: str, version: str = "1.1.0", **ipam: object) -> dict:
    section = {
        "type": "railyard-ipam",
        "default_ipv4_ippool": ["gpu1-net11"],
        "default_ipv6_ippool": ["gpu1-v6"],
        "socket": socket_path,
    }
    section.update(ipam)
    return {"cniVersion": version, "name": "rail1", "type": "macvlan", "ipam": section}


def run(command: str, conf: dict, cid: str = "c1", **env: str) -> tuple[int, object]:
    environ = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": "/var/run/netns/ra-absent",
        "CNI_IFNAME": "net1",
        "CNI_PATH": "/usr/lib/cni",
        "CNI_ARGS": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod-0;K8S_POD_UID=u1",
        "RAILYARD_NODE_NAME": "node1",
        **env,
    }
    out = io.StringIO()
    code = run_plugin(
        commands.plugin_funcs(),
        "railyard ipam test",
        env=environ,
        stdin=io.BytesIO(json.dumps(conf).encode()),
        stdout=out,
        stderr=io.StringIO(),
        deadline_seconds=None,
    )
    text = out.getvalue()
    return code, json.loads(text) if text else None


def test_add_with_ipamd_down_is_try_again_and_del_still_succeeds(short_dir) -> None:
    conf = netconf(str(short_dir / "down.sock"), timeout=0.05)
    code, err = run("ADD", conf)
    assert code == 1 and err["code"] == 11
    assert run("DEL", conf) == (0, None)


def test_bad_pool_list_is_a_config_error_without_contacting_ipamd() -> None:
    calls: list[str] = []

    def factory(netconf, env):
        calls.append("client")
        raise AssertionError("no client for a bad config")

    conf = netconf("/nonexistent", default_ipv4_ippool=7)
    out = io.StringIO()
    code = run_plugin(
        commands.plugin_funcs(make_ipam=factory),
        "t",
        env={
            "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "c",
            "CNI_NETNS": "/x",
            "CNI_IFNAME": "net1",
            "CNI_PATH": "/usr/lib/cni",
        },
        stdin=io.BytesIO(json.dumps(conf).encode()),
        stdout=out,
        stderr=io.StringIO(),
        deadline_seconds=None,
    )
    assert code == 1 and json.loads(out.getvalue())["code"] == 7
    assert calls == []
