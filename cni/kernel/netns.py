# SPDX-License-Identifier: Apache-2.0
"""Network namespace handles: open by path (never create), setns, temporary netns.

May import: the standard library and ``cni.kernel`` (contract). ``cni.kernel.links``
imports this module, never the reverse: ``Namespaces`` is handed the ``Links`` it
evacuates a temporary netns with (the one on ``Deps``).

Namespaces are always opened with ``os.open(path, O_RDONLY)`` and verified with the
``NS_GET_NSTYPE`` ioctl, so a missing path is ``NetnsNotFound`` and is never created
(pyroute2's default ``O_CREAT`` would create one).

``in_netns`` switches the *calling thread* with setns(2) and restores it afterwards
(Go's ``ns.Do()``; a Python thread is an OS thread, so no pin is needed). The
netns is per thread: an ADD's helper threads (the IPAM call ahead,
``cni.attach.ipam_ahead``; the conflict and gateway probes,
``cni.attach.detection``, which make their sockets in the pod's netns on
their own thread) and the exporter's scrape threads keep theirs while one
thread is switched. What must not happen is code on the switched thread that
expects the host's netns: keep the block to the calls that need the pod's,
and a restore that fails raises (the thread cannot be trusted after it).
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import fcntl
import logging
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from cni.kernel import KernelError, Links, NetnsNotFound, NotANetns

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # _IO(0xb7, 0x3), linux/nsfs.h, since 4.11
OWN_NETNS = "/proc/self/ns/net"
THREAD_NETNS = "/proc/thread-self/ns/net"

_libc = ctypes.CDLL(None, use_errno=True)


class _SocketCache(Protocol):
    def forget(self, netns: str) -> None: ...


# Adapters that keep sockets per namespace register here; a socket holds a reference
# on its netns, so temporary() must make them drop theirs before it closes the last fd.
_caches: weakref.WeakSet[_SocketCache] = weakref.WeakSet()


def register_cache(cache: _SocketCache) -> None:
    """Ask to be told (``forget(path)``) before a temporary netns is destroyed."""
    _caches.add(cache)


def open_netns(path: str) -> int:
    """An O_RDONLY fd on the network namespace at ``path``; NetnsNotFound otherwise."""
    try:
        # Non-blocking: a FIFO given as a netns would block a plain open until
        # a writer came, past any deadline; nsfs files ignore the flag.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise NetnsNotFound(f"netns {path}: {exc.strerror}", exc.errno) from exc
    try:
        nstype = fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError as exc:
        os.close(fd)
        # ENOTTY: a plain file, e.g. a netns file whose bind mount is already gone.
        raise NotANetns(f"netns {path}: not a namespace", exc.errno) from exc
    if nstype != CLONE_NEWNET:
        os.close(fd)
        raise NotANetns(f"netns {path}: not a network namespace")
    return fd


def netns_key(path: str) -> tuple[int, int]:
    """(st_dev, st_ino) of the namespace at ``path``: its identity while it lives."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise NetnsNotFound(f"netns {path}: {exc.strerror}", exc.errno) from exc
    return st.st_dev, st.st_ino


def setns(fd: int) -> None:
    """Switch the calling thread into the network namespace ``fd``."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise KernelError(f"setns: {os.strerror(err)}", err)


@contextmanager
def in_netns_fd(fd: int) -> Iterator[None]:
    """Run the block with the calling thread inside netns ``fd``, then switch back."""
    saved = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd)
        try:
            yield
        finally:
            # If this fails the thread is stranded in the wrong netns; nothing later
            # could be trusted, so the error must propagate.
            setns(saved)
    finally:
        os.close(saved)


@contextmanager
def in_netns(path: str | None) -> Iterator[None]:
    """Run the block inside the netns at ``path`` (None: the process's own netns).

    A thread already there runs the block as it is (two stat calls tell):
    no setns, so reading the host's own devices needs no CAP_SYS_ADMIN.
    """
    target = OWN_NETNS if path is None else path
    if netns_key(target) == netns_key(THREAD_NETNS):
        yield
        return
    fd = open_netns(target)
    try:
        with in_netns_fd(fd):
            yield
    finally:
        os.close(fd)


class Namespaces:
    """``Netns`` adapter: existence checks and a no-leak temporary namespace."""

    def __init__(self, links: Links | None = None) -> None:
        self._own_key = netns_key(OWN_NETNS)
        self._links = links

    def exists(self, path: str) -> bool:
        try:
            os.close(open_netns(path))
        except NetnsNotFound:
            return False
        return True

    def check(self, path: str) -> None:
        os.close(open_netns(path))

    def is_current(self, path: str) -> bool:
        return netns_key(path) == self._own_key

    @contextmanager
    def temporary(self) -> Iterator[str]:
        """A fresh netns held only by an fd of this process; yields its /proc path.

        unshare(2) on this thread then setns back costs well under 1 ms, needs no
        fork, no mount and no name, and cannot leak: if the process dies the fd
        closes and the namespace goes away (see the module doc for the setns rule).
        On exit every netdev still inside is moved back to the process's netns
        through the ``Links`` this object was built with.
        """
        if self._links is None:
            raise KernelError("Namespaces.temporary() needs the Links to evacuate with")
        links = self._links
        saved = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise KernelError(f"unshare(CLONE_NEWNET): {os.strerror(err)}", err)
            try:
                fd = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
            finally:
                setns(saved)
        finally:
            os.close(saved)
        path = f"/proc/{os.getpid()}/fd/{fd}"
        try:
            yield path
        finally:
            try:
                _evacuate(links, path)
            finally:
                for cache in list(_caches):
                    cache.forget(path)
                os.close(fd)


def _evacuate(links: Links, path: str) -> None:
    """Move every netdev but lo from ``path`` back to the process's netns."""
    for link in links.list(path):
        if link.name == "lo":
            continue
        try:
            links.move(link.name, None, netns=path)
        except KernelError as exc:
            if exc.errno != errno_mod.EEXIST:
                raise
            # The host already has that name: let the kernel pick a free one,
            # as it does itself when a netns dies ("dev%d").
            new = links.move_renamed(link.index, None, "ryback%d", netns=path)
            log.warning(
                "temporary netns: %s moved back as %s (name taken in host)",
                link.name,
                new,
            )
        else:
            log.info("temporary netns: moved %s back to the host", link.name)
