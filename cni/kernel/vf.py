# SPDX-License-Identifier: Apache-2.0
"""``VfOps`` adapter: PF-side VF settings over rtnetlink, driver rebind in sysfs.

May import: the standard library, pyroute2's netlink message classes (this module
is imported lazily inside ``real_deps()``), ``cni.kernel``, ``cni.kernel.links``
(errno translation) and ``cni.kernel.sysfs``.

Every setter is one RTM_SETLINK on the PF, found by name, carrying
``IFLA_VFINFO_LIST -> IFLA_VF_INFO -> <one IFLA_VF_* attribute>``; ``get_vf`` is
RTM_GETLINK with ``IFLA_EXT_MASK = RTEXT_FILTER_VF``. Numbers and struct layouts
are those of include/uapi/linux/if_link.h (see tests/unit/cni/kernel/
test_vf_messages.py, which pins the bytes).

pyroute2 0.9.7's own ``vfinfo`` classes encode MAC, rate, spoofchk, trust and link
state as the kernel expects and are reused. Two are redefined here because they
do not match the uapi structs:
- ``IFLA_VF_VLAN_INFO``: ``struct ifla_vf_vlan_info`` is 16 bytes (two bytes of
  tail padding after ``__be16 vlan_proto``); pyroute2 sends 14 and the kernel
  rejects anything shorter than the struct with EINVAL.
- ``IFLA_VF_IB_NODE_GUID`` / ``IFLA_VF_IB_PORT_GUID``: ``struct ifla_vf_guid`` is
  ``{__u32 vf; (4 bytes padding) __u64 guid;}`` = 16 bytes; pyroute2 models it as
  36 bytes and so mis-decodes the 16 the kernel sends.
The message is sent on a plain NETLINK_ROUTE socket opened per call in the
plugin's own netns (PFs stay in the host; no setns needed).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_NEWLINK, RTM_SETLINK
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from cni.kernel import DeviceNotFound, KernelError, NotSupported, VfInfo
from cni.kernel.links import errno_error
from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

# include/uapi/linux/if_link.h
IFLA_IFNAME = 3
IFLA_NUM_VF = 21
IFLA_VFINFO_LIST = 22
IFLA_EXT_MASK = 29
IFLA_VF_INFO = 1
IFLA_VF_MAC = 1
IFLA_VF_VLAN = 2
IFLA_VF_TX_RATE = 3
IFLA_VF_SPOOFCHK = 4
IFLA_VF_LINK_STATE = 5
IFLA_VF_RATE = 6
IFLA_VF_TRUST = 9
IFLA_VF_IB_NODE_GUID = 10
IFLA_VF_IB_PORT_GUID = 11
IFLA_VF_VLAN_LIST = 12
IFLA_VF_VLAN_INFO = 1
# include/uapi/linux/rtnetlink.h
RTEXT_FILTER_VF = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
UNSET = 0xFFFFFFFF  # the kernel's (u32)-1: driver did not report spoofchk/trust

_PYROUTE2_VF = ifinfmsg.vflist.vfinfo  # vf_mac, vf_rate, vf_spoofchk, ...


class vf_link_msg(nlmsg):
    """RTM_{GET,SET,NEW}LINK carrying only what VF handling needs."""

    prefix = "IFLA_"
    fields = ifinfmsg.fields  # struct ifinfomsg
    nla_map = (
        (IFLA_IFNAME, "IFLA_IFNAME", "asciiz"),
        (IFLA_NUM_VF, "IFLA_NUM_VF", "uint32"),
        (IFLA_VFINFO_LIST, "IFLA_VFINFO_LIST", "vf_list"),
        (IFLA_EXT_MASK, "IFLA_EXT_MASK", "uint32"),
    )

    class vf_list(nla):
        nla_map = ((IFLA_VF_INFO, "IFLA_VF_INFO", "vf_info"),)

        class vf_info(nla):
            prefix = "IFLA_VF_"
            nla_map = (
                (IFLA_VF_MAC, "IFLA_VF_MAC", "vf_mac"),
                (IFLA_VF_VLAN, "IFLA_VF_VLAN", "vf_vlan"),
                (IFLA_VF_TX_RATE, "IFLA_VF_TX_RATE", "vf_tx_rate"),
                (IFLA_VF_SPOOFCHK, "IFLA_VF_SPOOFCHK", "vf_spoofchk"),
                (IFLA_VF_LINK_STATE, "IFLA_VF_LINK_STATE", "vf_link_state"),
                (IFLA_VF_RATE, "IFLA_VF_RATE", "vf_rate"),
                (IFLA_VF_TRUST, "IFLA_VF_TRUST", "vf_trust"),
                (IFLA_VF_IB_NODE_GUID, "IFLA_VF_IB_NODE_GUID", "vf_guid"),
                (IFLA_VF_IB_PORT_GUID, "IFLA_VF_IB_PORT_GUID", "vf_guid"),
                (IFLA_VF_VLAN_LIST, "IFLA_VF_VLAN_LIST", "vf_vlan_list"),
            )
            vf_mac = _PYROUTE2_VF.vf_mac  # {u32 vf; u8 mac[32]}
            vf_vlan = _PYROUTE2_VF.vf_vlan  # {u32 vf, vlan, qos}
            vf_tx_rate = _PYROUTE2_VF.vf_tx_rate  # {u32 vf, rate}
            vf_spoofchk = _PYROUTE2_VF.vf_spoofchk  # {u32 vf, setting}
            vf_link_state = _PYROUTE2_VF.vf_link_state  # {u32 vf, link_state}
            vf_rate = _PYROUTE2_VF.vf_rate  # {u32 vf, min_tx_rate, max_tx_rate}
            vf_trust = _PYROUTE2_VF.vf_trust  # {u32 vf, setting}

            class vf_guid(nla):
                # struct ifla_vf_guid { __u32 vf; __u64 guid; } (u64 aligned)
                fields = (("vf", "I"), ("__pad", "4x"), ("guid", "Q"))

            class vf_vlan_list(nla):
                nla_map = ((IFLA_VF_VLAN_INFO, "IFLA_VF_VLAN_INFO", "vf_vlan_info"),)

                class vf_vlan_info(nla):
                    # struct ifla_vf_vlan_info {__u32 vf, vlan, qos; __be16 proto;}
                    fields = (
                        ("vf", "I"),
                        ("vlan", "I"),
                        ("qos", "I"),
                        ("vlan_proto", ">H"),
                        ("__pad", "2x"),
                    )


def guid_to_int(guid: str) -> int:
    """ "00:11:..:77" (8 bytes, as ib-sriov-cni takes it) -> u64, first byte high."""
    raw = bytes(int(x, 16) for x in guid.split(":"))
    if len(raw) != 8:
        raise ValueError(f"GUID {guid!r} must have 8 bytes")
    return int.from_bytes(raw, "big")


def int_to_guid(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(8, "big"))


def setlink_msg(pf: str, vf_attr: tuple[str, Any]) -> vf_link_msg:
    """RTM_SETLINK on PF ``pf`` (by name) with one IFLA_VF_* attribute."""
    msg = vf_link_msg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = 0
    msg["flags"] = 0
    msg["change"] = 0
    msg["attrs"] = [
        ("IFLA_IFNAME", pf),
        ("IFLA_VFINFO_LIST", {"attrs": [("IFLA_VF_INFO", {"attrs": [vf_attr]})]}),
    ]
    msg["header"]["type"] = RTM_SETLINK
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    return msg


def getlink_msg(pf: str) -> vf_link_msg:
    """RTM_GETLINK for PF ``pf`` asking the kernel to include IFLA_VFINFO_LIST."""
    msg = vf_link_msg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = 0
    msg["flags"] = 0
    msg["change"] = 0
    msg["attrs"] = [("IFLA_IFNAME", pf), ("IFLA_EXT_MASK", RTEXT_FILTER_VF)]
    msg["header"]["type"] = RTM_GETLINK
    msg["header"]["flags"] = NLM_F_REQUEST
    return msg


def mac_attr(vf: int, mac: str) -> tuple[str, Any]:
    return ("IFLA_VF_MAC", {"vf": vf, "mac": mac.lower()})


def vlan_attr(vf: int, vlan: int, qos: int, proto: int) -> tuple[str, Any]:
    info = {"vf": vf, "vlan": vlan, "qos": qos, "vlan_proto": proto}
    return ("IFLA_VF_VLAN_LIST", {"attrs": [("IFLA_VF_VLAN_INFO", info)]})


def rate_attr(vf: int, min_tx: int, max_tx: int) -> tuple[str, Any]:
    return ("IFLA_VF_RATE", {"vf": vf, "min_tx_rate": min_tx, "max_tx_rate": max_tx})


def spoofchk_attr(vf: int, on: bool) -> tuple[str, Any]:
    return ("IFLA_VF_SPOOFCHK", {"vf": vf, "spoofchk": int(on)})


def trust_attr(vf: int, on: bool) -> tuple[str, Any]:
    return ("IFLA_VF_TRUST", {"vf": vf, "trust": int(on)})


def link_state_attr(vf: int, state: int) -> tuple[str, Any]:
    return ("IFLA_VF_LINK_STATE", {"vf": vf, "link_state": state})


def guid_attr(name: str, vf: int, guid: str) -> tuple[str, Any]:
    return (name, {"vf": vf, "guid": guid_to_int(guid)})


def _setting(value: int) -> bool | None:
    return None if value == UNSET else bool(value)


def decode_vfs(data: bytes) -> dict[int, VfInfo]:
    """VF index -> VfInfo from one RTM_NEWLINK message (bytes, header included)."""
    msg = vf_link_msg(data)
    msg.decode()
    vflist = msg.get_attr("IFLA_VFINFO_LIST")
    if vflist is None:
        return {}
    out: dict[int, VfInfo] = {}
    for info in vflist.get_attrs("IFLA_VF_INFO"):
        mac = info.get_attr("IFLA_VF_MAC")
        if mac is None:
            continue
        fields: dict[str, Any] = {"vf": mac["vf"], "mac": mac["mac"]}
        vlan = info.get_attr("IFLA_VF_VLAN")
        if vlan is not None:
            fields.update(vlan=vlan["vlan"], qos=vlan["qos"])
        vlist = info.get_attr("IFLA_VF_VLAN_LIST")
        if vlist is not None:
            entries = vlist.get_attrs("IFLA_VF_VLAN_INFO")
            if entries:
                first = entries[0]
                fields.update(
                    vlan=first["vlan"], qos=first["qos"], vlan_proto=first["vlan_proto"]
                )
        spoof = info.get_attr("IFLA_VF_SPOOFCHK")
        if spoof is not None:
            fields["spoofchk"] = _setting(spoof["spoofchk"])
        trust = info.get_attr("IFLA_VF_TRUST")
        if trust is not None:
            fields["trust"] = _setting(trust["trust"])
        state = info.get_attr("IFLA_VF_LINK_STATE")
        if state is not None:
            fields["link_state"] = state["link_state"]
        rate = info.get_attr("IFLA_VF_RATE")
        if rate is not None:
            fields.update(
                min_tx_rate=rate["min_tx_rate"], max_tx_rate=rate["max_tx_rate"]
            )
        else:
            tx = info.get_attr("IFLA_VF_TX_RATE")
            if tx is not None:
                fields["max_tx_rate"] = tx["tx_rate"]
        for attr, key in (
            ("IFLA_VF_IB_NODE_GUID", "node_guid"),
            ("IFLA_VF_IB_PORT_GUID", "port_guid"),
        ):
            guid = info.get_attr(attr)
            if guid is not None:
                fields[key] = int_to_guid(guid["guid"])
        out[fields["vf"]] = VfInfo(**fields)
    return out


def _nl_messages(buf: bytes) -> list[tuple[int, int, bytes]]:
    """(type, seq, whole message bytes) for each netlink message in ``buf``."""
    out = []
    offset = 0
    while offset + 16 <= len(buf):
        length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", buf, offset)
        if length < 16:
            break
        out.append((mtype, seq, buf[offset : offset + length]))
        offset += (length + 3) & ~3
    return out


PENDING = b"pending"  # parse_reply: nothing for this request in the buffer yet


def parse_reply(buf: bytes, seq: int, what: str) -> bytes | None:
    """The RTM_NEWLINK answering ``seq`` in ``buf``, None for an ACK or done,
    ``PENDING`` if ``buf`` holds nothing for us; a kernel error is raised."""
    for mtype, mseq, data in _nl_messages(buf):
        if mseq != seq:
            continue
        if mtype == NLMSG_ERROR:
            code = -struct.unpack_from("=i", data, 16)[0]
            if code == 0:
                return None
            raise errno_error(code, what)
        if mtype == RTM_NEWLINK:
            return data
        if mtype == NLMSG_DONE:
            return None
    return PENDING


class PyRoute2VfOps:
    """``VfOps`` on the real kernel (see the module doc)."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs
        self._seq = 0

    def _talk(self, msg: vf_link_msg, what: str) -> bytes | None:
        """Send one request; the RTM_NEWLINK reply (GET) or None (ACK)."""
        self._seq += 1
        msg["header"]["sequence_number"] = self._seq
        msg["header"]["pid"] = 0
        msg.encode()
        return self._exchange(bytes(msg.data), self._seq, what)

    def _exchange(self, request: bytes, seq: int, what: str) -> bytes | None:
        """The kernel round trip of one encoded request (the only socket code)."""
        with socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0
        ) as sock:
            sock.bind((0, 0))
            sock.send(request)
            while True:
                # A PF with many VFs answers with a large message: peek its size.
                size = sock.recv_into(
                    bytearray(16), 16, socket.MSG_PEEK | socket.MSG_TRUNC
                )
                reply = parse_reply(sock.recv(max(size, 65536)), seq, what)
                if reply is not PENDING:
                    return reply

    def _set(self, pf: str, vf: int, attr: tuple[str, Any], what: str) -> None:
        self._talk(setlink_msg(pf, attr), f"PF {pf} VF {vf}: {what}")

    def get_vf(self, pf: str, vf: int) -> VfInfo:
        data = self._talk(getlink_msg(pf), f"PF {pf}: read VF table")
        vfs = decode_vfs(data) if data else {}
        if not vfs:
            raise NotSupported(f"PF {pf} reports no SR-IOV VFs (IFLA_VFINFO_LIST)")
        if vf not in vfs:
            raise DeviceNotFound(f"PF {pf} has no VF {vf} (VFs: {sorted(vfs)})")
        return vfs[vf]

    def set_vlan(self, pf: str, vf: int, vlan: int, qos: int, proto: int) -> None:
        what = f"vlan {vlan} qos {qos} proto {proto:#06x}"
        self._set(pf, vf, vlan_attr(vf, vlan, qos, proto), what)

    def set_mac(self, pf: str, vf: int, mac: str) -> None:
        self._set(pf, vf, mac_attr(vf, mac), f"mac {mac}")

    def set_rate(self, pf: str, vf: int, min_tx: int, max_tx: int) -> None:
        self._set(pf, vf, rate_attr(vf, min_tx, max_tx), f"rate {min_tx}-{max_tx} Mbps")

    def set_spoofchk(self, pf: str, vf: int, on: bool) -> None:
        self._set(pf, vf, spoofchk_attr(vf, on), f"spoofchk {'on' if on else 'off'}")

    def set_trust(self, pf: str, vf: int, on: bool) -> None:
        self._set(pf, vf, trust_attr(vf, on), f"trust {'on' if on else 'off'}")

    def set_link_state(self, pf: str, vf: int, state: int) -> None:
        self._set(pf, vf, link_state_attr(vf, state), f"link state {state}")

    def set_node_guid(self, pf: str, vf: int, guid: str) -> None:
        attr = guid_attr("IFLA_VF_IB_NODE_GUID", vf, guid)
        self._set(pf, vf, attr, f"node GUID {guid}")

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        attr = guid_attr("IFLA_VF_IB_PORT_GUID", vf, guid)
        self._set(pf, vf, attr, f"port GUID {guid}")

    def rebind(self, pci: str) -> None:
        driver = self.sysfs.driver(pci)
        if driver is None:
            raise DeviceNotFound(f"{pci} is not bound to a driver: nothing to rebind")
        path = self.sysfs.driver_path(driver)
        for op in ("unbind", "bind"):
            try:
                fd = os.open(path / op, os.O_WRONLY)
                try:
                    os.write(fd, pci.encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                raise KernelError(
                    f"{op} {pci} via driver {driver}: {exc.strerror}", exc.errno
                ) from exc
        log.info("rebound %s to %s", pci, driver)
