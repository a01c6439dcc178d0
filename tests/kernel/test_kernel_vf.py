# SPDX-License-Identifier: Apache-2.0
"""NetlinkVfOps on a host without SR-IOV: a veth "PF" refuses cleanly."""

from __future__ import annotations

import pytest

from cni.kernel import LinkNotFound, NotSupported
from cni.kernel.sysfs import Sysfs
from cni.kernel.vf import NetlinkVfOps
from tests.conftest import unique_name
from tests.kernel.conftest import Host, ip

pytestmark = pytest.mark.kernel

GUID = "00:11:22:33:44:55:66:77"
SETTERS = {
    "mac": lambda ops, pf: ops.set_mac(pf, 0, "02:00:00:00:00:01"),
    "vlan": lambda ops, pf: ops.set_vlan(pf, 0, 100, 0, 0x8100),
    "rate": lambda ops, pf: ops.set_rate(pf, 0, 0, 1000),
    "spoofchk": lambda ops, pf: ops.set_spoofchk(pf, 0, True),
    "trust": lambda ops, pf: ops.set_trust(pf, 0, True),
    "link_state": lambda ops, pf: ops.set_link_state(pf, 0, 1),
    "node_guid": lambda ops, pf: ops.set_node_guid(pf, 0, GUID),
    "port_guid": lambda ops, pf: ops.set_port_guid(pf, 0, GUID),
}


@pytest.fixture
def veth_pf(host: Host) -> str:
    name = unique_name("rk")
    ip(None, "link", "add", name, "type", "veth", "peer", "name", unique_name("rk"))
    return name


@pytest.mark.parametrize("setter", sorted(SETTERS))
def test_setting_a_vf_on_a_veth_is_not_supported(veth_pf: str, setter: str):
    with pytest.raises(NotSupported) as err:
        SETTERS[setter](NetlinkVfOps(Sysfs()), veth_pf)
    assert err.value.errno == 95


def test_reading_the_vf_table_of_a_veth_is_not_supported(veth_pf: str):
    with pytest.raises(NotSupported, match="no SR-IOV VFs"):
        NetlinkVfOps(Sysfs()).get_vf(veth_pf, 0)


def test_a_missing_pf_is_link_not_found(host: Host):
    with pytest.raises(LinkNotFound):
        NetlinkVfOps(Sysfs()).set_trust("rknothere", 0, True)
    with pytest.raises(LinkNotFound):
        NetlinkVfOps(Sysfs()).get_vf("rknothere", 0)
