# SPDX-License-Identifier: Apache-2.0
"""The ADD's address asked for on a thread while the VF moves (``ipam_ahead``).

An IPAM double that blocks until the test lets it answer shows the call runs
beside the caller, and that the rollback's release can never reach the IPAM
before the allocation it undoes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from cni.attach.ipam_ahead import AllocationAhead
from cni.errors import CniError
from cni.ipam import Attachment, IpamAddress, IpamError, IpamRequest, IpamResult
from cni.rollback import Rollback

REQ = IpamRequest(network="gpu1", container_id="c1", ifname="net1")
ADDRESS = IpamAddress(address="172.16.11.5/24", gateway="172.16.11.254")


class GatedIpam:
    """Allocates once ``gate`` is set; journals every call in order."""

    uses_interface = False

    def __init__(self, error: IpamError | None = None) -> None:
        self.gate = threading.Event()
        self.journal: list[str] = []
        self.error = error

    def allocate(self, req: IpamRequest) -> IpamResult:
        self.journal.append("allocate asked")
        assert self.gate.wait(5)
        self.journal.append("allocate answered")
        if self.error is not None:
            raise self.error
        return IpamResult(ips=[ADDRESS])

    def release(self, network: str, container_id: str, ifname: str) -> None:
        self.journal.append(f"release {network} {container_id}/{ifname}")

    def check(self, network: str, container_id: str, ifname: str) -> IpamResult:
        raise NotImplementedError

    def gc(self, network: str, valid: Sequence[Attachment]) -> int:
        raise NotImplementedError

    def status(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_the_call_runs_beside_the_caller_and_result_waits_for_it():
    ipam = GatedIpam()
    rb = Rollback()
    ahead = AllocationAhead.start(ipam, REQ, rb)
    # The caller goes on (the move into the pod) while the IPAM has not answered.
    threading.Timer(0.05, ipam.gate.set).start()
    assert ahead.result().ips == [ADDRESS]
    rb.commit()
    assert ipam.journal == ["allocate asked", "allocate answered"]


def test_a_rollback_releases_only_after_the_allocation_ended():
    ipam = GatedIpam()
    with pytest.raises(RuntimeError):
        with Rollback() as rb:
            AllocationAhead.start(ipam, REQ, rb)
            threading.Timer(0.05, ipam.gate.set).start()
            raise RuntimeError("the move into the pod failed")
    assert ipam.journal == [
        "allocate asked",
        "allocate answered",
        "release gpu1 c1/net1",
    ]


def test_an_ipam_refusal_is_the_adds_error_with_its_code_and_is_released():
    ipam = GatedIpam(IpamError(11, "pool gpu1-v4 exhausted", "0 of 254 free"))
    ipam.gate.set()
    with pytest.raises(CniError) as caught:
        with Rollback() as rb:
            AllocationAhead.start(ipam, REQ, rb).result()
    assert (caught.value.code, caught.value.msg, caught.value.details) == (
        11,
        "pool gpu1-v4 exhausted",
        "0 of 254 free",
    )
    # A refusal may come after a partial write: the release is idempotent.
    assert ipam.journal[-1] == "release gpu1 c1/net1"


def test_an_ipam_never_reached_releases_nothing():
    ipam = GatedIpam(IpamError(11, "ipamd is not answering", unchanged=True))
    ipam.gate.set()
    with pytest.raises(CniError):
        with Rollback() as rb:
            AllocationAhead.start(ipam, REQ, rb).result()
    assert ipam.journal == ["allocate asked", "allocate answered"]


class InterfaceIpam(GatedIpam):
    """A delegated plugin such as dhcp: it may use the pod's interface."""

    uses_interface = True


def test_an_ipam_that_may_use_the_interface_is_asked_only_for_the_answer():
    ipam = InterfaceIpam()
    ipam.gate.set()
    rb = Rollback()
    ahead = AllocationAhead.start(ipam, REQ, rb)
    assert ipam.journal == []  # the VF is not in the pod yet
    assert ahead.result().ips == [ADDRESS]
    rb.commit()
    assert ipam.journal == ["allocate asked", "allocate answered"]


def test_an_add_failing_before_it_asked_releases_nothing():
    ipam = InterfaceIpam()
    with pytest.raises(RuntimeError):
        with Rollback() as rb:
            AllocationAhead.start(ipam, REQ, rb)
            raise RuntimeError("the move into the pod failed")
    assert ipam.journal == []
