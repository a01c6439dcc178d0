# SPDX-License-Identifier: Apache-2.0
"""The IPAM request both VF plugins build from their netconf (cni.attach.ipam_glue)."""

from __future__ import annotations

import json
from typing import Any

from cni.attach.ipam_glue import ipam_request
from cni.plugins.ib_sriov.config import parse_conf as load_ib
from cni.plugins.sriov.config import parse_conf as load_sriov
from cni.skel import CmdArgs

PCI = "0000:af:06.0"


def _args(conf: dict[str, Any]) -> CmdArgs:
    return CmdArgs(
        command="ADD",
        container_id="c1",
        netns="/var/run/netns/p",
        ifname="net1",
        args="K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0",
        path=[],
        stdin_data=json.dumps(conf).encode(),
        netconf=conf,
        env={"RAILYARD_NODE_NAME": "node7"},
    )


def _conf(kind: str, **ipam: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "rail1",
        "type": kind,
        "deviceID": PCI,
        "ipam": {"type": "railyard", "default_ipv4_ippool": ["gpu1-net11"], **ipam},
    }


def test_ipam_sticky_true_is_passed_to_ipamd_for_statefulset_pods() -> None:
    conf = _conf("sriov", sticky=True)
    args = _args(conf)
    req = ipam_request(args, load_sriov(conf, args.cni_args))
    assert req is not None
    assert req.sticky is True
    assert (req.pod_namespace, req.pod_name, req.node_name) == ("ns", "web-0", "node7")
    assert req.ipv4_pools == ("gpu1-net11",)


def test_ipam_sticky_is_off_unless_it_is_json_true() -> None:
    for ipam in ({}, {"sticky": False}, {"sticky": "true"}):
        conf = _conf("sriov", **ipam)
        args = _args(conf)
        req = ipam_request(args, load_sriov(conf, args.cni_args))
        assert req is not None and req.sticky is False, ipam


def test_ib_sriov_netconf_builds_the_same_request_as_sriov() -> None:
    conf = _conf("ib-sriov", sticky=True)
    args = _args(conf)
    ib = ipam_request(args, load_ib(conf, args.cni_args))
    sriov = ipam_request(args, load_sriov({**conf, "type": "sriov"}, args.cni_args))
    assert ib is not None and ib == sriov


def test_no_ipam_section_means_no_request() -> None:
    conf = _conf("sriov")
    del conf["ipam"]
    args = _args(conf)
    assert ipam_request(args, load_sriov(conf, args.cni_args)) is None
