# SPDX-License-Identifier: Apache-2.0
"""NETLINK_RDMA (nldev) messages: the one definition the plugins and the exporter use.

pyroute2 0.9 has no NETLINK_RDMA support, so the nldev messages Railyard sends
are defined here on pyroute2's netlink core (``nlmsg``/``nla`` for the
encoding, ``Marshal`` + ``NetlinkSocket`` for the conversation):

- the rdma plugins' adapter (``cni.kernel.rdma``): SYS_GET (the RDMA netns
  mode), GET dump (the devices of the caller's netns), SET with NET_NS_FD
  (move a device);
- the exporter's statistics (``cni.kernel.rdma_stats``): GET dump (with the
  node and system image GUIDs) and STAT_GET (a port's hardware counters).

Every number comes from the kernel uapi headers: ``linux/netlink.h``
(NETLINK_RDMA) and ``rdma/rdma_netlink.h`` (RDMA_NL_NLDEV, RDMA_NLDEV_CMD_*,
RDMA_NLDEV_ATTR_*); the messages are checked byte for byte in
``tests/unit/cni/rdma/test_rdma_nldev_messages.py`` and
``tests/unit/exporter/test_exporter_rdma_netlink.py``.

nldev messages carry no family header (no genlmsghdr): the attributes follow
the ``nlmsghdr`` directly, and the message type is ``RDMA_NL_GET_TYPE(client,
op) = (client << 10) + op``.

May import: pyroute2's netlink core, the stdlib and ``cni.kernel``'s errors.
Loaded only with its users, never on a plugin's start path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, nla, nlmsg
from pyroute2.netlink.nlsocket import AsyncNetlinkSocket, Marshal, NetlinkSocket

from cni.kernel import NotSupported

# linux/netlink.h
NETLINK_RDMA = 20
# rdma/rdma_netlink.h: enum { RDMA_NL_IWCM = 2, RDMA_NL_RSVD, RDMA_NL_LS,
# RDMA_NL_NLDEV, ... }
RDMA_NL_NLDEV = 5
# enum rdma_nldev_command
RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_SET = 2
RDMA_NLDEV_CMD_SYS_GET = 6
RDMA_NLDEV_CMD_STAT_GET = 17
# enum rdma_nldev_attr
RDMA_NLDEV_ATTR_DEV_INDEX = 1  # u32
RDMA_NLDEV_ATTR_DEV_NAME = 2  # string
RDMA_NLDEV_ATTR_PORT_INDEX = 3  # u32
RDMA_NLDEV_ATTR_NODE_GUID = 6  # u64
RDMA_NLDEV_ATTR_SYS_IMAGE_GUID = 7  # u64
RDMA_NLDEV_SYS_ATTR_NETNS_MODE = 66  # u8: 1 = shared, 0 = exclusive
RDMA_NLDEV_NET_NS_FD = 68  # u32
RDMA_NLDEV_ATTR_STAT_HWCOUNTERS = 80  # nested
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY = 81  # nested
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME = 82  # string
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE = 83  # u64

#: mlx5 RoCE/IB devices of a VF or PF port have one port, numbered 1.
PORT = 1


def nldev_type(op: int) -> int:
    """RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op) from rdma_netlink.h."""
    return (RDMA_NL_NLDEV << 10) + op


NLDEV_GET = nldev_type(RDMA_NLDEV_CMD_GET)  # 0x1401
NLDEV_SET = nldev_type(RDMA_NLDEV_CMD_SET)  # 0x1402
NLDEV_SYS_GET = nldev_type(RDMA_NLDEV_CMD_SYS_GET)  # 0x1406
NLDEV_STAT_GET = nldev_type(RDMA_NLDEV_CMD_STAT_GET)  # 0x1411


class nldevmsg(nlmsg):  # noqa: N801 - pyroute2 names message classes in lower case
    """An nldev request or reply: nlmsghdr followed by attributes only."""

    fields = ()
    nla_map = (
        (RDMA_NLDEV_ATTR_DEV_INDEX, "RDMA_NLDEV_ATTR_DEV_INDEX", "uint32"),
        (RDMA_NLDEV_ATTR_DEV_NAME, "RDMA_NLDEV_ATTR_DEV_NAME", "asciiz"),
        (RDMA_NLDEV_ATTR_PORT_INDEX, "RDMA_NLDEV_ATTR_PORT_INDEX", "uint32"),
        (RDMA_NLDEV_ATTR_NODE_GUID, "RDMA_NLDEV_ATTR_NODE_GUID", "uint64"),
        (RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, "RDMA_NLDEV_ATTR_SYS_IMAGE_GUID", "uint64"),
        (RDMA_NLDEV_SYS_ATTR_NETNS_MODE, "RDMA_NLDEV_SYS_ATTR_NETNS_MODE", "uint8"),
        (RDMA_NLDEV_NET_NS_FD, "RDMA_NLDEV_NET_NS_FD", "uint32"),
        (
            RDMA_NLDEV_ATTR_STAT_HWCOUNTERS,
            "RDMA_NLDEV_ATTR_STAT_HWCOUNTERS",
            "hwcounters",
        ),
    )

    class hwcounters(nla):  # noqa: N801
        nla_map = (
            (
                RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY,
                "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY",
                "entry",
            ),
        )

        class entry(nla):  # noqa: N801
            nla_map = (
                (
                    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME,
                    "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME",
                    "asciiz",
                ),
                (
                    RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE,
                    "RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE",
                    "uint64",
                ),
            )


class MarshalNldev(Marshal):
    msg_map = {
        NLDEV_GET: nldevmsg,
        NLDEV_SET: nldevmsg,
        NLDEV_SYS_GET: nldevmsg,
        NLDEV_STAT_GET: nldevmsg,
    }


class AsyncRdmaSocket(AsyncNetlinkSocket):
    marshal_class = MarshalNldev


class RdmaSocket(NetlinkSocket):
    """A NETLINK_RDMA socket in the namespace of the thread that opens it."""

    async_class = AsyncRdmaSocket


# ------------------------------------------------------------ message builders


def _request(
    mtype: int, flags: int, attrs: list[tuple[str, int]] | None = None
) -> nldevmsg:
    msg = nldevmsg()
    msg["header"]["type"] = mtype
    msg["header"]["flags"] = flags
    if attrs:
        msg["attrs"] = attrs
    return msg


def sys_get_request() -> nldevmsg:
    """RDMA_NLDEV_CMD_SYS_GET: no attributes; the reply carries NETNS_MODE."""
    return _request(NLDEV_SYS_GET, NLM_F_REQUEST | NLM_F_ACK)


def dev_dump_request() -> nldevmsg:
    """RDMA_NLDEV_CMD_GET with NLM_F_DUMP: one reply per visible device."""
    return _request(NLDEV_GET, NLM_F_REQUEST | NLM_F_DUMP)


def set_netns_request(index: int, ns_fd: int) -> nldevmsg:
    """RDMA_NLDEV_CMD_SET with DEV_INDEX and NET_NS_FD: move a device."""
    return _request(
        NLDEV_SET,
        NLM_F_REQUEST | NLM_F_ACK,
        [("RDMA_NLDEV_ATTR_DEV_INDEX", index), ("RDMA_NLDEV_NET_NS_FD", ns_fd)],
    )


def stat_get_request(index: int, port: int = PORT) -> nldevmsg:
    """RDMA_NLDEV_CMD_STAT_GET with DEV_INDEX and PORT_INDEX: a port's counters."""
    return _request(
        NLDEV_STAT_GET,
        NLM_F_REQUEST,
        [("RDMA_NLDEV_ATTR_DEV_INDEX", index), ("RDMA_NLDEV_ATTR_PORT_INDEX", port)],
    )


# ------------------------------------------------------------ reply parsers


@dataclass(frozen=True, slots=True)
class NldevDevice:
    """One device of a GET dump reply."""

    index: int
    node_guid: str = ""  # as sysfs prints it, "" when the reply has none
    sys_image_guid: str = ""


def guid_text(value: int) -> str:
    """A u64 GUID as sysfs prints it: ``b83f:aa00:0001:0002``."""
    raw = f"{value:016x}"
    return ":".join(raw[i : i + 4] for i in range(0, 16, 4))


def parse_netns_mode(reply: Any) -> str:
    """ "shared" or "exclusive" from a SYS_GET reply (the u8 is 1 for shared)."""
    value = reply.get_attr("RDMA_NLDEV_SYS_ATTR_NETNS_MODE")
    if value is None:
        raise NotSupported(
            "the kernel does not report the RDMA netns mode (RDMA_NLDEV_SYS_ATTR_"
            "NETNS_MODE missing; kernel older than 5.3?)"
        )
    return "shared" if value else "exclusive"


def parse_devices(replies: list[Any]) -> dict[str, NldevDevice]:
    """Device name -> its index and GUIDs, from the replies of a device dump."""
    out: dict[str, NldevDevice] = {}
    for reply in replies:
        name = reply.get_attr("RDMA_NLDEV_ATTR_DEV_NAME")
        index = reply.get_attr("RDMA_NLDEV_ATTR_DEV_INDEX")
        if name is None or index is None:
            continue
        node = reply.get_attr("RDMA_NLDEV_ATTR_NODE_GUID")
        image = reply.get_attr("RDMA_NLDEV_ATTR_SYS_IMAGE_GUID")
        out[name] = NldevDevice(
            index,
            guid_text(node) if node is not None else "",
            guid_text(image) if image is not None else "",
        )
    return out


def parse_hwcounters(reply: Any) -> dict[str, int]:
    """Counter name -> value from a STAT_GET reply."""
    table = reply.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTERS")
    if table is None:
        return {}
    out = {}
    for entry in table.get_attrs("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY"):
        name = entry.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME")
        value = entry.get_attr("RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE")
        if name is not None and value is not None:
            out[str(name)] = int(value)
    return out
