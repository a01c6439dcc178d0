# SPDX-License-Identifier: Apache-2.0
"""The ADD's address, asked for while the kernel moves the VF.

Standard library, ``cni.errors``, ``cni.ipam`` and ``cni.rollback`` only.

Nothing an ADD does before the address is known depends on it: the PF-side
settings and the move into the pod (~20 ms the kernel spends under its rtnl
lock, with this process asleep) need no address, and the IPAM call (ipamd's
durable commit, or an exec'd IPAM plugin) needs nothing from them. So the call
runs on a thread from the moment the record is saved, and the ADD takes its
answer when it configures the address: the IPAM's time comes off every NIC.
An IPAM that may use the interface itself (``IpamClient.uses_interface``: a
delegated plugin such as dhcp) is not asked ahead: the call runs when the ADD
takes the answer, once the interface is up in the pod.

The rollback's release waits for that call to end first, so a release can
never reach the IPAM ahead of the allocation it undoes (which would leak the
address); an IPAM never reached, or never asked, releases nothing.
"""

from __future__ import annotations

import logging
import threading

from cni.errors import CniError
from cni.ipam import IpamClient, IpamError, IpamRequest, IpamResult
from cni.rollback import Rollback

log = logging.getLogger(__name__)


class AllocationAhead:
    """``ipam.allocate(req)`` on its own thread from ``start``, or from
    ``result()`` for an IPAM that may use the interface; ``result()`` joins it."""

    def __init__(self, ipam: IpamClient, req: IpamRequest) -> None:
        self._ipam = ipam
        self._req = req
        self._asked = False
        self._result: IpamResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"allocate-{req.ifname}", daemon=True
        )

    @classmethod
    def start(cls, ipam: IpamClient, req: IpamRequest, rb: Rollback) -> AllocationAhead:
        """Start the call (unless the IPAM may use the interface), its release
        on ``rb`` first (a timed-out allocate may still have succeeded)."""
        ahead = cls(ipam, req)
        rb.push(
            ahead.release, f"release the addresses of {req.container_id}/{req.ifname}"
        )
        if not ipam.uses_interface:
            ahead._ask()
        return ahead

    def _ask(self) -> None:
        self._asked = True
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._ipam.allocate(self._req)
        except BaseException as exc:  # noqa: BLE001 - handed to result()
            self._error = exc

    def result(self) -> IpamResult:
        """The IPAM's answer; its refusal as a ``CniError`` with its code."""
        if not self._asked:
            self._ask()
        self._thread.join()
        if isinstance(self._error, IpamError):
            err = self._error
            raise CniError(err.code, err.msg, err.details) from err
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def release(self) -> None:
        """The rollback's undo: once the call ended, release what it may hold."""
        if not self._asked:
            return  # the ADD failed before it asked: nothing can be held
        self._thread.join()
        if isinstance(self._error, IpamError) and self._error.unchanged:
            # The IPAM was never reached, so nothing is held: a release would
            # fail the same way and keep a record GC retries forever.
            log.debug("nothing to release: %s", self._error.msg)
            return
        req = self._req
        self._ipam.release(req.network, req.container_id, req.ifname)
