# SPDX-License-Identifier: Apache-2.0
"""The VF netdev: into the pod (renamed away from the host) and back again.

Written against ``cni.kernel.Links`` / ``cni.kernel.Netns`` only; imports
nothing third-party.

Never renamed in the host: that races with udev (host-device's and sriov-cni's
scar), and older ``dev<ifindex>`` temp names collided
(sriov-cni #56, #111). Into the pod: one rtnetlink request moves the VF and
renames it there (a move is ~20 ms of kernel time; the kernel takes the new
name at once when the pod has a link called like the VF's host name). Back
to the host: renamed in the pod to its host name, then moved home; only when
the pod has a link of that name does it go through a fresh empty netns and
get renamed there. Stale altnames are removed wherever the rename happened
(kernel 6.x keeps the old name as an altname, sriov-cni #445).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial

from cni.errors import DEVICE_ERROR, CniError
from cni.kernel import (
    KernelError,
    LinkExists,
    LinkInfo,
    LinkNotFound,
    Links,
    Netns,
)
from cni.kernel.cni_errors import cni_error, kernel_step
from cni.rollback import Rollback

log = logging.getLogger(__name__)


def _drop_altnames(
    links: Links, name: str, netns: str | None, stale: set[str]
) -> LinkInfo:
    """Remove the ``stale`` altnames of ``name``; the link as it is then."""
    info = links.get(name, netns)
    for alt in info.altnames:
        if alt in stale:
            links.del_altname(name, alt, netns)
    kept = tuple(alt for alt in info.altnames if alt not in stale)
    return dataclasses.replace(info, altnames=kept)


def _rename_via(
    links: Links,
    namespaces: Netns,
    name: str,
    new_name: str,
    src: str | None,
    dst: str | None,
) -> None:
    """Move ``name`` from ``src`` to ``dst`` as ``new_name``, renamed in a temp netns.

    On failure inside, the link is renamed back and returned to ``src`` before
    the error propagates, so the caller's view is unchanged.
    """
    with namespaces.temporary() as tmp:
        _rename_in(links, name, new_name, src, tmp, tmp)
        try:
            links.move(new_name, dst, netns=tmp)
        except BaseException:
            # temporary() still evacuates it to the host on exit if this fails.
            _put_back(links, new_name, name, tmp, src)
            raise


def _rename_in(
    links: Links,
    name: str,
    new_name: str,
    src: str | None,
    dst: str | None,
    rename_in: str | None,
) -> LinkInfo | None:
    """Move ``name`` from ``src`` to ``dst`` as ``new_name`` with one netns move.

    The rename happens in ``rename_in`` (``src`` or ``dst``, never the host),
    which must not hold a link called like the name taken there. On failure
    the link is put back as it was before the error propagates. Returns the
    link as ``dst`` shows it when the rename was the last step, else None (a
    move may renumber it, so only a new lookup can tell).
    """
    moved = False
    current = name
    try:
        if rename_in != src:
            links.move(name, dst, netns=src)
            moved = True
        if new_name != name:
            links.rename(name, new_name, rename_in)
            current = new_name
        info = _drop_altnames(links, new_name, rename_in, {name, new_name})
        if not moved:
            links.move(new_name, dst, netns=src)
            return None
        return info
    except BaseException:
        # Renamed in src: the move was the last step, so nothing moved.
        _put_back(links, current, name, dst if moved else src, src)
        raise


def _move_as(
    links: Links, name: str, new_name: str, src: str | None, dst: str
) -> LinkInfo:
    """Move ``name`` from ``src`` into ``dst`` renamed ``new_name``: one request.

    The kernel moves the link and renames it in ``dst`` while it holds the
    rtnl lock once (if ``dst`` has a link called ``name``, it arrives as
    ``new_name`` directly). Every rtnetlink request of every pod queues on
    that lock behind the moves of other pods (~20 ms each), so in a burst of
    pods one request instead of a move, a lookup and a rename is waiting saved.
    A rename the kernel refuses after the move leaves the link in ``dst``
    under ``name``; it is put back before the error propagates.
    """
    index = links.get(name, src).index
    try:
        links.move_renamed(index, dst, new_name, netns=src)
    except BaseException:
        try:
            if links.find(name, dst) is not None:
                _put_back(links, name, name, dst, src)
        except KernelError as exc:
            log.error("cannot tell whether %s was left in %s: %s", name, dst, exc)
        raise
    return _drop_altnames(links, new_name, dst, {name, new_name})


def _put_back(
    links: Links, current: str, name: str, where: str | None, src: str | None
) -> None:
    """Undo a half-done move: ``current`` in ``where`` back to ``name`` in ``src``."""
    try:
        if current != name:
            links.rename(current, name, where)
        if where != src:
            links.move(name, src, netns=where)
    except KernelError as undo:
        log.error("returning %s to its netns failed: %s", name, undo)


def _move_renamed(
    links: Links,
    namespaces: Netns,
    name: str,
    new_name: str,
    src: str | None,
    dst: str | None,
) -> LinkInfo | None:
    """``name`` in ``src`` to ``new_name`` in ``dst``, never renamed in the host:
    into a netns in one request; out of one renamed there first, or through a
    temporary netns when ``src`` already has a link called ``new_name``.

    Returns the link in ``dst`` when the last step already showed it, else None.
    """
    if name == new_name:
        links.move(name, dst, netns=src)
        return None
    if dst is not None:
        return _move_as(links, name, new_name, src, dst)
    if src is not None and links.find(new_name, src) is None:
        return _rename_in(links, name, new_name, src, dst, src)
    _rename_via(links, namespaces, name, new_name, src, dst)
    return None


def move_into_pod(
    links: Links,
    namespaces: Netns,
    host_name: str,
    pod_netns: str,
    ifname: str,
    rb: Rollback,
) -> LinkInfo:
    """Move the host VF netdev into ``pod_netns`` named ``ifname``; undo on ``rb``."""
    try:
        namespaces.check(pod_netns)
    except KernelError as exc:
        raise cni_error(
            exc, f"failed to open netns {pod_netns!r} to move {host_name} into"
        ) from exc
    if links.find(ifname, pod_netns) is not None:
        # SPEC.md "ADD": error if the interface already exists in the container.
        raise CniError(
            DEVICE_ERROR,
            f"failed to move IF {host_name} to netns",
            f"{ifname} already exists in {pod_netns}",
        )
    try:
        moved = _move_renamed(links, namespaces, host_name, ifname, None, pod_netns)
    except LinkExists as exc:
        raise CniError(
            DEVICE_ERROR,
            f"failed to move IF {host_name} to netns",
            f"file exists: {exc}",
        ) from exc
    except KernelError as exc:
        _guard_stranded(links, namespaces, host_name, ifname, pod_netns, rb)
        raise cni_error(
            exc, f"setupVF failed: moving {host_name} into the pod"
        ) from exc
    rb.push(
        lambda: return_to_host(links, namespaces, ifname, pod_netns, host_name),
        f"move {ifname} back to the host as {host_name}",
    )
    return moved if moved is not None else links.get(ifname, pod_netns)


def _guard_stranded(
    links: Links,
    namespaces: Netns,
    host_name: str,
    ifname: str,
    pod_netns: str,
    rb: Rollback,
) -> None:
    """A failed move whose own undo failed too left the VF in the pod: one
    more attempt goes on ``rb``, so that if it fails as well the rollback is
    incomplete and the record stays for DEL, instead of a VF nobody knows of."""
    try:
        if links.find(host_name, None) is not None:
            return
        found = next(
            (n for n in (host_name, ifname) if links.find(n, pod_netns) is not None),
            None,
        )
        if found is not None:
            rb.push(
                lambda: return_to_host(links, namespaces, found, pod_netns, host_name),
                f"move {found} back to the host as {host_name}",
            )
    except KernelError as exc:
        log.error("cannot tell where %s was left: %s", host_name, exc)


def return_to_host(
    links: Links, namespaces: Netns, ifname: str, pod_netns: str, host_name: str
) -> None:
    """Take ``ifname`` out of the pod back to the host as ``host_name``.

    Down first (sriov-cni ReleaseVF); renamed in the pod (or, if the pod has a
    link of that name, in a temporary netns) so the pod-name altname is
    dropped and the host never sees the pod name.
    """
    links.set_down(ifname, pod_netns)
    _move_renamed(links, namespaces, ifname, host_name, pod_netns, None)


def restore_link(
    links: Links, name: str, mac: str | None, mtu: int | None, netns: str | None
) -> None:
    """Put back the original MAC and MTU (PR #316: a pod's MTU must not leak)."""
    info = links.get(name, netns)
    if mac and info.mac != mac:
        links.set_mac(name, mac, netns)
    if mtu and info.mtu != mtu:
        links.set_mtu(name, mtu, netns)


def _set_undoable(
    rb: Rollback,
    apply: Callable[[], None],
    undo: Callable[[], None],
    undo_what: str,
    error: str,
) -> None:
    """``apply`` with ``undo`` registered first (a half-done write is covered)."""
    rb.push(undo, undo_what)
    try:
        apply()
    except KernelError as exc:
        raise cni_error(exc, error) from exc


def configure_in_pod(
    links: Links,
    ifname: str,
    netns: str,
    mac: str | None,
    mtu: int | None,
    orig: LinkInfo,
    rb: Rollback,
) -> LinkInfo:
    """Set MAC and MTU on the pod side, bring it up; undo on ``rb``.

    The undos run while the link is still in the pod: the later rollback step
    (``move_into_pod``'s) takes it back to the host with its original values.
    """
    if mac and mac != orig.mac:
        _set_undoable(
            rb,
            partial(links.set_mac, ifname, mac, netns),
            partial(links.set_mac, ifname, orig.mac, netns),
            f"restore MAC of {ifname}",
            f"failed to set netlink MAC address to {mac} on {ifname}",
        )
    if mtu and mtu != orig.mtu:
        _set_undoable(
            rb,
            partial(links.set_mtu, ifname, mtu, netns),
            partial(links.set_mtu, ifname, orig.mtu, netns),
            f"restore MTU of {ifname}",
            f"failed to set MTU {mtu} on {ifname}",
        )
    # sriov-cni sets these in the pod (errors ignored): the kernel announces
    # the MAC on link changes, and optimistic DAD lets IPv6 be used at once.
    for key in (
        f"net/ipv4/conf/{ifname}/arp_notify",
        f"net/ipv6/conf/{ifname}/ndisc_notify",
        f"net/ipv6/conf/{ifname}/optimistic_dad",
    ):
        try:
            links.set_sysctl(key, "1", netns)
        except (KernelError, OSError) as exc:
            log.debug("sysctl %s=1 in %s ignored: %s", key, netns, exc)
    rb.push(lambda: links.set_down(ifname, netns), f"set {ifname} down")
    with kernel_step(f"failed to set link {ifname} up in {netns}"):
        links.set_up(ifname, netns)
    if (mac and mac != orig.mac) or (mtu and mtu != orig.mtu):
        # Something was written: report the MAC and MTU as the kernel took them.
        return links.get(ifname, netns)
    return dataclasses.replace(orig, up=True)


def locate_host_netdev(
    links: Links,
    pci_names: list[str],
    cached: str | None,
    mac: str | None,
    ifindex: int | None,
) -> LinkInfo | None:
    """The VF's netdev in the host: the PCI function's ``net/`` names first
    (what the kernel shows), then the ``cached`` name.

    The cached name is accepted only if the link's MAC or ifindex matches the
    cached identity, when one is given (a host link may legitimately carry a
    pod's name such as ``net1``). sysfs follows renames on a real host, so the
    fallback matters only where ``net/`` lags (a plain-file tree).
    """
    for name in pci_names:
        info = links.find(name)
        if info is not None:
            return info
    if not cached:
        return None
    info = links.find(cached)
    if info is None:
        return None
    if mac is None and ifindex is None:
        return info
    if (mac and info.mac == mac) or (ifindex is not None and info.index == ifindex):
        return info
    return None


def find_returned_vf(
    links: Links,
    candidates: list[str],
    ifname: str,
    mac: str | None,
    ifindex: int | None,
) -> LinkInfo | None:
    """Find a VF that came back to the host when its pod netns was destroyed.

    The kernel returns a real VF to the init netns under its pod name: the
    ``net/`` names first, else the link named like the pod ifname with a
    matching MAC or ifindex (``locate_host_netdev``).
    """
    if not mac and ifindex is None:
        # Nothing to recognise a pod-named host link by: never take it.
        return locate_host_netdev(links, candidates, None, None, None)
    return locate_host_netdev(links, candidates, ifname, mac, ifindex)


def rename_in_host(links: Links, namespaces: Netns, name: str, host_name: str) -> None:
    """Rename a host link via a temporary netns (never in the host: udev races)."""
    if name == host_name:
        return
    links.set_down(name)
    try:
        _rename_via(links, namespaces, name, host_name, None, None)
    except LinkNotFound:
        raise
    except KernelError as exc:
        raise cni_error(
            exc, f"failed to rename link {name} to host name {host_name}"
        ) from exc
