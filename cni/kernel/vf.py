# SPDX-License-Identifier: Apache-2.0
"""``VfOps`` adapter: PF-side VF settings over rtnetlink, driver rebind in sysfs.

May import: the standard library, ``cni.kernel``, ``cni.kernel.rtnl`` (the
message codec), ``cni.kernel.links`` (errno translation) and ``cni.kernel.sysfs``.

Every setter is one RTM_SETLINK on the PF, found by name, carrying
``IFLA_VFINFO_LIST -> IFLA_VF_INFO -> <one IFLA_VF_* attribute>``; ``get_vf`` is
RTM_GETLINK with ``IFLA_EXT_MASK = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS``:
without the per-VF statistics. With them (~295 bytes a VF) the list outgrows
its attribute's 16-bit length above ~222 VFs, the length wraps, and the
kernel's answer holds only the first few dozen VFs; without them 256 VFs fit.
The VF count the kernel puts beside the list (``IFLA_NUM_VF``) tells a
truncated list from a short one. Numbers and struct layouts
are those of include/uapi/linux/if_link.h (tests/unit/cni/kernel/
test_vf_messages.py pins the bytes); two need care:
- ``IFLA_VF_VLAN_INFO``: ``struct ifla_vf_vlan_info`` is 16 bytes (two bytes of
  tail padding after ``__be16 vlan_proto``); the kernel rejects anything shorter
  than the struct with EINVAL.
- ``IFLA_VF_IB_NODE_GUID`` / ``IFLA_VF_IB_PORT_GUID``: ``struct ifla_vf_guid`` is
  ``{__u32 vf; (4 bytes padding) __u64 guid;}`` = 16 bytes.

Packed and read with ``struct`` through ``cni.kernel.rtnl``, like every other
rtnetlink message of the plugins; not with pyroute2's message classes: importing
them loads the whole pyroute2 package (~150 ms on every plugin start without
the agent, as much as the rest of the plugin's imports together), and two of
its VF structs do not match the uapi (the two above).

The message is sent on a plain NETLINK_ROUTE socket opened per call in the
plugin's own netns (PFs stay in the host; no setns needed).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from typing import Any

from cni.kernel import DeviceNotFound, KernelError, NotSupported, VfInfo, rtnl
from cni.kernel.links import translate
from cni.kernel.sysfs import Sysfs

log = logging.getLogger(__name__)

# include/uapi/linux/if_link.h
IFLA_NUM_VF = 21
IFLA_VFINFO_LIST = 22
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
RTEXT_FILTER_SKIP_STATS = 1 << 3
UNSET = 0xFFFFFFFF  # the kernel's (u32)-1: driver did not report spoofchk/trust

#: struct ifla_vf_mac {__u32 vf; __u8 mac[32];}
VF_MAC = struct.Struct("=I32s")
#: struct ifla_vf_vlan {__u32 vf, vlan, qos;}; ifla_vf_rate {vf, min, max}
VF_U32X3 = struct.Struct("=III")
#: struct ifla_vf_tx_rate, _spoofchk, _trust, _link_state: {__u32 vf, value;}
VF_U32X2 = struct.Struct("=II")
#: struct ifla_vf_guid {__u32 vf; __u64 guid;} (the u64 8-aligned)
VF_GUID = struct.Struct("=I4xQ")
#: the tail of struct ifla_vf_vlan_info after {vf, vlan, qos}: __be16 vlan_proto
VLAN_PROTO = struct.Struct(">H2x")

_ACKED = rtnl.NLM_F_REQUEST | rtnl.NLM_F_ACK


def guid_to_int(guid: str) -> int:
    """ "00:11:..:77" (8 bytes, as ib-sriov-cni takes it) -> u64, first byte high."""
    raw = bytes(int(x, 16) for x in guid.split(":"))
    if len(raw) != 8:
        raise ValueError(f"GUID {guid!r} must have 8 bytes")
    return int.from_bytes(raw, "big")


def int_to_guid(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(8, "big"))


def _pf_body(pf: str, tail: bytes) -> bytes:
    """struct ifinfomsg naming no index, then the PF by name and ``tail``."""
    head = rtnl.IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    return head + rtnl.attr_str(rtnl.IFLA_IFNAME, pf) + tail


def setlink_body(pf: str, vf_attr: bytes) -> bytes:
    """RTM_SETLINK on PF ``pf`` with one IFLA_VF_* attribute."""
    vf_info = rtnl.attr(IFLA_VF_INFO, vf_attr)
    return _pf_body(pf, rtnl.attr(IFLA_VFINFO_LIST, vf_info))


def getlink_body(pf: str) -> bytes:
    """RTM_GETLINK for PF ``pf`` asking for IFLA_VFINFO_LIST without statistics."""
    mask = RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS
    return _pf_body(pf, rtnl.attr_u32(rtnl.IFLA_EXT_MASK, mask))


def mac_attr(vf: int, mac: str) -> bytes:
    return rtnl.attr(IFLA_VF_MAC, VF_MAC.pack(vf, bytes.fromhex(mac.replace(":", ""))))


def vlan_attr(vf: int, vlan: int, qos: int, proto: int) -> bytes:
    info = VF_U32X3.pack(vf, vlan, qos) + VLAN_PROTO.pack(proto)
    return rtnl.attr(IFLA_VF_VLAN_LIST, rtnl.attr(IFLA_VF_VLAN_INFO, info))


def rate_attr(vf: int, min_tx: int, max_tx: int) -> bytes:
    return rtnl.attr(IFLA_VF_RATE, VF_U32X3.pack(vf, min_tx, max_tx))


def spoofchk_attr(vf: int, on: bool) -> bytes:
    return rtnl.attr(IFLA_VF_SPOOFCHK, VF_U32X2.pack(vf, int(on)))


def trust_attr(vf: int, on: bool) -> bytes:
    return rtnl.attr(IFLA_VF_TRUST, VF_U32X2.pack(vf, int(on)))


def link_state_attr(vf: int, state: int) -> bytes:
    return rtnl.attr(IFLA_VF_LINK_STATE, VF_U32X2.pack(vf, state))


def guid_attr(kind: int, vf: int, guid: str) -> bytes:
    return rtnl.attr(kind, VF_GUID.pack(vf, guid_to_int(guid)))


def _setting(value: int) -> bool | None:
    return None if value == UNSET else bool(value)


def _unpack(layout: struct.Struct, payload: bytes | None) -> tuple[Any, ...] | None:
    """``payload`` read as ``layout``; None when absent or shorter than the struct."""
    if payload is None or len(payload) < layout.size:
        return None
    return layout.unpack_from(payload)


def _decode_vf(info: bytes) -> VfInfo | None:
    """One IFLA_VF_INFO's attributes as a VfInfo (None without IFLA_VF_MAC)."""
    found = rtnl.attrs(info)
    mac = _unpack(VF_MAC, found.get(IFLA_VF_MAC))
    if mac is None:
        return None
    fields: dict[str, Any] = {"vf": mac[0], "mac": rtnl.hex_address(mac[1][:6])}
    vlan = _unpack(VF_U32X3, found.get(IFLA_VF_VLAN))
    if vlan is not None:
        fields.update(vlan=vlan[1], qos=vlan[2])
    vlans = found.get(IFLA_VF_VLAN_LIST)
    if vlans is not None:
        info = rtnl.attrs(vlans).get(IFLA_VF_VLAN_INFO, b"")
        head = _unpack(VF_U32X3, info)
        tail = _unpack(VLAN_PROTO, info[VF_U32X3.size :])
        if head is not None and tail is not None:
            fields.update(vlan=head[1], qos=head[2], vlan_proto=tail[0])
    for kind, key in ((IFLA_VF_SPOOFCHK, "spoofchk"), (IFLA_VF_TRUST, "trust")):
        setting = _unpack(VF_U32X2, found.get(kind))
        if setting is not None:
            fields[key] = _setting(setting[1])
    state = _unpack(VF_U32X2, found.get(IFLA_VF_LINK_STATE))
    if state is not None:
        fields["link_state"] = state[1]
    rate = _unpack(VF_U32X3, found.get(IFLA_VF_RATE))
    if rate is not None:
        fields.update(min_tx_rate=rate[1], max_tx_rate=rate[2])
    else:
        tx = _unpack(VF_U32X2, found.get(IFLA_VF_TX_RATE))
        if tx is not None:
            fields["max_tx_rate"] = tx[1]
    for kind, key in (
        (IFLA_VF_IB_NODE_GUID, "node_guid"),
        (IFLA_VF_IB_PORT_GUID, "port_guid"),
    ):
        guid = _unpack(VF_GUID, found.get(kind))
        if guid is not None:
            fields[key] = int_to_guid(guid[1])
    return VfInfo(**fields)


def decode_vfs(body: bytes) -> dict[int, VfInfo]:
    """VF index -> VfInfo from the body of one RTM_NEWLINK answer."""
    vflist = rtnl.attrs(body, rtnl.IFINFOMSG.size).get(IFLA_VFINFO_LIST)
    if vflist is None:
        return {}
    out: dict[int, VfInfo] = {}
    for kind, info in rtnl.iter_attrs(vflist):
        if kind != IFLA_VF_INFO:
            continue
        decoded = _decode_vf(info)
        if decoded is not None:
            out[decoded.vf] = decoded
    return out


def num_vfs(body: bytes) -> int | None:
    """IFLA_NUM_VF of one RTM_NEWLINK answer: how many VFs the PF has."""
    raw = rtnl.attrs(body, rtnl.IFINFOMSG.size).get(IFLA_NUM_VF)
    return (
        struct.unpack_from("=I", raw)[0] if raw is not None and len(raw) >= 4 else None
    )


PENDING = b"pending"  # parse_reply: nothing for this request in the buffer yet


def parse_reply(buf: bytes, seq: int, what: str) -> bytes | None:
    """The body of the RTM_NEWLINK answering ``seq`` in ``buf``, None for an
    ACK or done, ``PENDING`` if ``buf`` holds nothing for us; a kernel
    refusal is raised as the contract's exception, with the kernel's reason."""
    try:
        for got_seq, msg in rtnl.split(buf):
            if got_seq != seq:
                continue
            if msg.type == rtnl.NLMSG_ERROR:
                err = rtnl.error_of(msg)
                if err is None:
                    return None
                raise err
            if msg.type == rtnl.RTM_NEWLINK:
                return msg.body
            if msg.type == rtnl.NLMSG_DONE:
                return None
    except rtnl.NetlinkErrno as exc:
        raise translate(exc, what) from exc
    return PENDING


class NetlinkVfOps:
    """``VfOps`` on the real kernel (see the module doc)."""

    def __init__(self, sysfs: Sysfs) -> None:
        self.sysfs = sysfs
        self._seq = 0

    def _talk(self, msg_type: int, flags: int, body: bytes, what: str) -> bytes | None:
        """Send one request; the RTM_NEWLINK body (GET) or None (ACK)."""
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        request = rtnl.pack(msg_type, flags, self._seq, body)
        return self._exchange(request, self._seq, what)

    def _exchange(self, request: bytes, seq: int, what: str) -> bytes | None:
        """The kernel round trip of one encoded request (the only socket code)."""
        with rtnl.open_socket() as sock:
            sock.send(request)
            while True:
                # A PF with many VFs answers with a large message: peek its size.
                size = sock.recv_into(
                    bytearray(16), 16, socket.MSG_PEEK | socket.MSG_TRUNC
                )
                reply = parse_reply(sock.recv(max(size, 65536)), seq, what)
                if reply is not PENDING:
                    return reply

    def _set(self, pf: str, vf: int, attr: bytes, what: str) -> None:
        body = setlink_body(pf, attr)
        self._talk(rtnl.RTM_SETLINK, _ACKED, body, f"PF {pf} VF {vf}: {what}")

    def get_vf(self, pf: str, vf: int) -> VfInfo:
        what = f"PF {pf}: read VF table"
        data = self._talk(rtnl.RTM_GETLINK, rtnl.NLM_F_REQUEST, getlink_body(pf), what)
        vfs = decode_vfs(data) if data else {}
        expected = num_vfs(data) if data else None
        if vf not in vfs and expected is not None and len(vfs) < expected:
            # The VFs that did fit are whole; the one asked for is past the cut.
            raise KernelError(
                f"PF {pf}: truncated VF list: the kernel reported {len(vfs)} of the"
                f" PF's {expected} VFs (IFLA_VFINFO_LIST outgrew its 64 KiB"
                f" attribute length), VF {vf} is not among them",
                errno.EMSGSIZE,
            )
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
        attr = guid_attr(IFLA_VF_IB_NODE_GUID, vf, guid)
        self._set(pf, vf, attr, f"node GUID {guid}")

    def set_port_guid(self, pf: str, vf: int, guid: str) -> None:
        attr = guid_attr(IFLA_VF_IB_PORT_GUID, vf, guid)
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
