# SPDX-License-Identifier: Apache-2.0
"""PF-side VF messages, byte for byte against the kernel uapi (no root needed).

Numbers, from include/uapi/linux/rtnetlink.h, if_link.h and netlink.h:
  RTM_NEWLINK=16, RTM_GETLINK=18, RTM_SETLINK=19; NLM_F_REQUEST=1, NLM_F_ACK=4;
  NLMSG_ERROR=2; struct nlmsghdr {u32 len; u16 type, flags; u32 seq, pid} = 16 B;
  struct ifinfomsg {u8 family, pad; u16 type; s32 index; u32 flags, change} = 16 B;
  IFLA_IFNAME=3, IFLA_MTU=4, IFLA_VFINFO_LIST=22, IFLA_EXT_MASK=29; RTEXT_FILTER_VF=1;
  IFLA_VF_INFO=1; IFLA_VF_MAC=1 {u32 vf; u8 mac[32]}, IFLA_VF_VLAN=2 {vf, vlan, qos},
  IFLA_VF_TX_RATE=3 {vf, rate}, IFLA_VF_SPOOFCHK=4 {vf, setting},
  IFLA_VF_LINK_STATE=5 {vf, link_state}, IFLA_VF_RATE=6 {vf, min_tx, max_tx},
  IFLA_VF_STATS=8 (nested), IFLA_VF_TRUST=9 {vf, setting},
  IFLA_VF_IB_NODE_GUID=10 / IFLA_VF_IB_PORT_GUID=11 {u32 vf; u64 guid} = 16 B
  (the u64 is 8-aligned), IFLA_VF_VLAN_LIST=12 -> IFLA_VF_VLAN_INFO=1
  {u32 vf, vlan, qos; __be16 vlan_proto} = 16 B (2 bytes tail padding).
Attributes: struct nlattr {u16 len; u16 type} then payload padded to 4 bytes.
All integers are host order (these tests pin little-endian x86/arm64) except
vlan_proto, which is big-endian.
"""

from __future__ import annotations

import struct
import sys

import pytest

from cni.kernel import DeviceNotFound, KernelError, LinkNotFound, NotSupported, VfInfo
from cni.kernel.sysfs import Sysfs
from cni.kernel.vf import (
    PENDING,
    NetlinkVfOps,
    decode_vfs,
    guid_to_int,
    int_to_guid,
    parse_reply,
)

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="host-order bytes")

RTM_NEWLINK, RTM_GETLINK, RTM_SETLINK = 16, 18, 19
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
IFLA_IFNAME, IFLA_MTU, IFLA_VFINFO_LIST, IFLA_EXT_MASK = 3, 4, 22, 29
RTEXT_FILTER_VF, RTEXT_FILTER_SKIP_STATS = 1, 8
IFLA_NUM_VF = 21
IFLA_VF_INFO = 1
(
    IFLA_VF_MAC,
    IFLA_VF_VLAN,
    IFLA_VF_TX_RATE,
    IFLA_VF_SPOOFCHK,
    IFLA_VF_LINK_STATE,
    IFLA_VF_RATE,
) = 1, 2, 3, 4, 5, 6
IFLA_VF_STATS, IFLA_VF_TRUST = 8, 9
IFLA_VF_IB_NODE_GUID, IFLA_VF_IB_PORT_GUID, IFLA_VF_VLAN_LIST = 10, 11, 12
IFLA_VF_VLAN_INFO = 1


def nlattr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\x00" * (-len(raw) % 4)


def nlmsg(mtype: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body


def ifinfomsg(index: int = 0) -> bytes:
    return struct.pack("=BxHiII", 0, 0, index, 0, 0)


def setlink(pf: str, seq: int, vf_attr: bytes) -> bytes:
    vfinfo = nlattr(IFLA_VFINFO_LIST, nlattr(IFLA_VF_INFO, vf_attr))
    body = ifinfomsg() + nlattr(IFLA_IFNAME, pf.encode() + b"\0") + vfinfo
    return nlmsg(RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK, seq, body)


def ack(seq: int) -> bytes:
    return nlmsg(NLMSG_ERROR, 0, seq, struct.pack("=i", 0) + b"\0" * 16)


class Wire(NetlinkVfOps):
    """The real adapter with the kernel round trip replaced by canned replies."""

    def __init__(self, replies: list[bytes] | None = None) -> None:
        super().__init__(Sysfs())
        self.sent: list[bytes] = []
        self.replies = replies or []

    def _exchange(self, request: bytes, seq: int, what: str) -> bytes | None:
        self.sent.append(request)
        reply = self.replies.pop(0) if self.replies else ack(seq)
        return parse_reply(reply, seq, what)


MAC = "02:00:00:aa:bb:01"
MAC_B = bytes.fromhex("020000aabb01")
GUID = "00:11:22:33:44:55:66:77"


@pytest.mark.parametrize(
    ("call", "vf_attr"),
    [
        (
            lambda ops: ops.set_mac("ens1f0", 3, MAC.upper()),
            nlattr(IFLA_VF_MAC, struct.pack("=I", 3) + MAC_B.ljust(32, b"\0")),
        ),
        (
            lambda ops: ops.set_vlan("ens1f0", 3, 100, 2, 0x88A8),
            nlattr(
                IFLA_VF_VLAN_LIST,
                nlattr(
                    IFLA_VF_VLAN_INFO,
                    struct.pack("=III", 3, 100, 2)
                    + struct.pack(">H", 0x88A8)
                    + b"\0\0",
                ),
            ),
        ),
        (
            lambda ops: ops.set_rate("ens1f0", 3, 10, 2000),
            nlattr(IFLA_VF_RATE, struct.pack("=III", 3, 10, 2000)),
        ),
        (
            lambda ops: ops.set_spoofchk("ens1f0", 3, False),
            nlattr(IFLA_VF_SPOOFCHK, struct.pack("=II", 3, 0)),
        ),
        (
            lambda ops: ops.set_trust("ens1f0", 3, True),
            nlattr(IFLA_VF_TRUST, struct.pack("=II", 3, 1)),
        ),
        (
            lambda ops: ops.set_link_state("ens1f0", 3, 2),
            nlattr(IFLA_VF_LINK_STATE, struct.pack("=II", 3, 2)),
        ),
        (
            lambda ops: ops.set_node_guid("ens1f0", 3, GUID),
            nlattr(IFLA_VF_IB_NODE_GUID, struct.pack("=I4xQ", 3, 0x0011223344556677)),
        ),
        (
            lambda ops: ops.set_port_guid("ens1f0", 3, GUID),
            nlattr(IFLA_VF_IB_PORT_GUID, struct.pack("=I4xQ", 3, 0x0011223344556677)),
        ),
    ],
    ids=["mac", "vlan", "rate", "spoofchk", "trust", "link_state", "node", "port"],
)
def test_setter_sends_exactly_the_uapi_bytes(call, vf_attr):
    ops = Wire()
    call(ops)
    assert ops.sent == [setlink("ens1f0", 1, vf_attr)]


def test_vlan_info_is_the_full_16_byte_struct():
    # The kernel rejects IFLA_VF_VLAN_INFO shorter than sizeof(struct
    # ifla_vf_vlan_info) == 16 with EINVAL (rtnetlink.c do_setvfinfo).
    ops = Wire()
    ops.set_vlan("p", 0, 5, 0, 0x8100)
    info_nla = ops.sent[0][-20:]
    assert struct.unpack("=HH", info_nla[:4]) == (20, IFLA_VF_VLAN_INFO)


def test_get_vf_asks_for_the_vf_table_by_name_without_statistics():
    # With per-VF statistics the list outgrows its 16-bit attribute length
    # above ~222 VFs; without them 256 VFs fit (pinned in tests/realkernel).
    ops = Wire([nlmsg(RTM_NEWLINK, 0, 1, reply_body())])
    ops.get_vf("ens1f0", 0)
    mask = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS  # 0x9
    body = (
        ifinfomsg()
        + nlattr(IFLA_IFNAME, b"ens1f0\0")
        + nlattr(IFLA_EXT_MASK, struct.pack("=I", mask))
    )
    assert ops.sent == [nlmsg(RTM_GETLINK, NLM_F_REQUEST, 1, body)]


def vf_info(
    vf: int,
    mac: bytes,
    vlan: int,
    qos: int,
    proto: int | None,
    spoof: int,
    trust: int,
    state: int,
    rate: tuple[int, int],
    guids: tuple[int, int] | None,
) -> bytes:
    attrs = nlattr(IFLA_VF_MAC, struct.pack("=I", vf) + mac.ljust(32, b"\0"))
    attrs += nlattr(IFLA_VF_VLAN, struct.pack("=III", vf, vlan, qos))
    if proto is not None:
        info = struct.pack("=III", vf, vlan, qos) + struct.pack(">H", proto) + b"\0\0"
        attrs += nlattr(IFLA_VF_VLAN_LIST, nlattr(IFLA_VF_VLAN_INFO, info))
    attrs += nlattr(IFLA_VF_TX_RATE, struct.pack("=II", vf, rate[1]))
    attrs += nlattr(IFLA_VF_SPOOFCHK, struct.pack("=II", vf, spoof))
    attrs += nlattr(IFLA_VF_LINK_STATE, struct.pack("=II", vf, state))
    attrs += nlattr(IFLA_VF_RATE, struct.pack("=III", vf, *rate))
    attrs += nlattr(IFLA_VF_TRUST, struct.pack("=II", vf, trust))
    if guids:
        attrs += nlattr(IFLA_VF_IB_NODE_GUID, struct.pack("=I4xQ", vf, guids[0]))
        attrs += nlattr(IFLA_VF_IB_PORT_GUID, struct.pack("=I4xQ", vf, guids[1]))
    attrs += nlattr(IFLA_VF_STATS, nlattr(0, struct.pack("=Q", 12345)))
    return nlattr(IFLA_VF_INFO, attrs)


def reply_body() -> bytes:
    vfs = vf_info(
        0, MAC_B, 100, 3, 0x88A8, 1, 0, 1, (10, 2000), (0x0011223344556677, 0xAABB)
    )
    # A driver that reports neither spoofchk nor trust leaves them at (u32)-1.
    vfs += vf_info(1, b"\0" * 6, 0, 0, None, 0xFFFFFFFF, 0xFFFFFFFF, 0, (0, 0), None)
    return (
        ifinfomsg(index=7)
        + nlattr(IFLA_IFNAME, b"ens1f0\0")
        + nlattr(IFLA_MTU, struct.pack("=I", 1500))
        + nlattr(IFLA_VFINFO_LIST, vfs)
    )


def test_decode_a_newlink_reply_with_a_vf_list():
    vfs = decode_vfs(reply_body())
    assert vfs == {
        0: VfInfo(
            vf=0,
            mac=MAC,
            vlan=100,
            qos=3,
            vlan_proto=0x88A8,
            spoofchk=True,
            trust=False,
            link_state=1,
            min_tx_rate=10,
            max_tx_rate=2000,
            node_guid=GUID,
            port_guid="00:00:00:00:00:00:aa:bb",
        ),
        1: VfInfo(vf=1, spoofchk=None, trust=None),
    }


def test_get_vf_returns_the_asked_vf():
    ops = Wire([nlmsg(RTM_NEWLINK, 0, 1, reply_body())])
    assert ops.get_vf("ens1f0", 1) == VfInfo(vf=1, spoofchk=None, trust=None)


def reply_with_count(count: int) -> bytes:
    """reply_body()'s two VFs, the PF saying it has ``count`` (IFLA_NUM_VF
    comes before the list, as rtnl_fill_vf puts it)."""
    head = ifinfomsg(index=7) + nlattr(IFLA_IFNAME, b"ens1f0\0")
    vfs = vf_info(0, MAC_B, 0, 0, 0x8100, 1, 0, 0, (0, 0), None)
    vfs += vf_info(1, MAC_B, 0, 0, 0x8100, 1, 0, 0, (0, 0), None)
    return nlmsg(
        RTM_NEWLINK,
        0,
        1,
        head
        + nlattr(IFLA_NUM_VF, struct.pack("=I", count))
        + nlattr(IFLA_VFINFO_LIST, vfs),
    )


def test_a_vf_past_a_truncated_vf_list_is_an_error_that_says_so():
    with pytest.raises(KernelError) as err:
        Wire([reply_with_count(256)]).get_vf("ens1f0", 255)
    assert str(err.value) == (
        "PF ens1f0: truncated VF list: the kernel reported 2 of the PF's 256 VFs"
        " (IFLA_VFINFO_LIST outgrew its 64 KiB attribute length), VF 255 is not"
        " among them"
    )
    assert err.value.errno == 90  # EMSGSIZE
    assert not isinstance(err.value, DeviceNotFound)  # the VF exists


def test_a_vf_inside_a_truncated_list_is_read():
    assert Wire([reply_with_count(256)]).get_vf("ens1f0", 1).mac == MAC


def test_a_vf_missing_from_a_whole_list_is_not_found():
    with pytest.raises(
        DeviceNotFound, match=r"PF ens1f0 has no VF 2 \(VFs: \[0, 1\]\)"
    ):
        Wire([reply_with_count(2)]).get_vf("ens1f0", 2)


def test_get_vf_of_a_pf_without_vf_list_is_not_supported():
    body = ifinfomsg(index=7) + nlattr(IFLA_IFNAME, b"veth0\0")
    ops = Wire([nlmsg(RTM_NEWLINK, 0, 1, body)])
    with pytest.raises(NotSupported):
        ops.get_vf("veth0", 0)


def test_kernel_errors_are_translated():
    enodev = nlmsg(NLMSG_ERROR, 0, 1, struct.pack("=i", -19) + b"\0" * 16)
    with pytest.raises(LinkNotFound) as err:
        Wire([enodev]).set_trust("nope", 0, True)
    assert err.value.errno == 19
    eopnotsupp = nlmsg(NLMSG_ERROR, 0, 1, struct.pack("=i", -95) + b"\0" * 16)
    with pytest.raises(NotSupported):
        Wire([eopnotsupp]).set_mac("veth0", 0, MAC)


def test_reply_for_another_sequence_is_ignored():
    stale = ack(7)
    assert parse_reply(stale, 8, "x") is PENDING  # not ours: keep reading
    assert parse_reply(stale + ack(8), 8, "x") is None


def test_guid_text_round_trips_with_first_byte_most_significant():
    assert guid_to_int(GUID) == 0x0011223344556677
    assert int_to_guid(0x0011223344556677) == GUID
    with pytest.raises(ValueError):
        guid_to_int("00:11:22")


def fake_vf(root, driver: str | None):
    dev = root / "bus/pci/devices/0000:af:00.2"
    dev.mkdir(parents=True)
    drivers = root / "bus/pci/drivers/mlx5_core"
    drivers.mkdir(parents=True)
    (drivers / "bind").write_text("")
    (drivers / "unbind").write_text("")
    if driver:
        (dev / "driver").symlink_to(f"../../drivers/{driver}")
    return drivers


def test_rebind_writes_the_pci_address_to_unbind_and_bind(tmp_path):
    drivers = fake_vf(tmp_path, "mlx5_core")
    NetlinkVfOps(Sysfs(tmp_path)).rebind("0000:af:00.2")
    assert (drivers / "unbind").read_text() == "0000:af:00.2"
    assert (drivers / "bind").read_text() == "0000:af:00.2"


def test_rebind_of_an_unbound_vf_is_device_not_found(tmp_path):
    fake_vf(tmp_path, None)
    with pytest.raises(DeviceNotFound, match="not bound"):
        NetlinkVfOps(Sysfs(tmp_path)).rebind("0000:af:00.2")


def test_an_attribute_shorter_than_its_struct_is_left_out_not_a_crash():
    attrs = nlattr(IFLA_VF_MAC, struct.pack("=I", 2) + MAC_B.ljust(32, b"\0"))
    attrs += nlattr(IFLA_VF_RATE, struct.pack("=II", 2, 10))  # 8 of 12 bytes
    attrs += nlattr(IFLA_VF_TRUST, struct.pack("=II", 2, 1))
    body = ifinfomsg(index=7) + nlattr(IFLA_VFINFO_LIST, nlattr(IFLA_VF_INFO, attrs))
    assert decode_vfs(body) == {2: VfInfo(vf=2, mac=MAC, trust=True)}
    no_mac = nlattr(IFLA_VF_INFO, nlattr(IFLA_VF_MAC, b"\x02\0"))
    body = ifinfomsg(index=7) + nlattr(IFLA_VFINFO_LIST, no_mac)
    assert decode_vfs(body) == {}
