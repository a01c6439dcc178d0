# SPDX-License-Identifier: Apache-2.0
"""IP-conflict and gateway detection, then the announcement (GARP / unsolicited NA).

Written against ``cni.kernel.Probes``; imports nothing third-party.

Spiderpool runs these in its IPAM plugin: conflict check before the gateway
check (its issue #4475), release the address on failure, announce afterwards
because the NIC is already up (its issue #4650). We run them in the plugin once
the address is on the NIC; the caller's rollback releases the address. IPoIB
probes may be unsupported by the adapter: then we skip with a log line instead
of failing the pod.

Cost. The conflict check is a wait for silence, so its window is paid by every
ADD; the gateway check ends at the gateway's first reply. The default window
is 90 ms with 3 probes spread inside it (sent at 0, 30 and 60 ms): a live
owner on a RoCE or Ethernet fabric answers an ARP/NDP probe within a
millisecond, and the later probes cover one lost frame. 90, not 100: the
gateway's reply and the announcement come on top, and a NIC's whole check
should cost at most 100 ms. A slow fabric gets a
longer window per network (``detectionWindowMs`` in the netconf). The caller
runs the window beside the ADD steps that do not depend on its verdict
(``start_detection``); its rollback undoes them when the verdict is a failure.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cni.errors import GATEWAY_UNREACHABLE, IP_CONFLICT, CniError
from cni.ipam import IpamAddress
from cni.kernel import (
    GatewayCheck,
    KernelError,
    NicProbeReport,
    NotSupported,
    Probes,
)
from cni.netconf_fields import DEFAULT_DETECTION_WINDOW_MS

log = logging.getLogger(__name__)

ARPHRD_INFINIBAND = 32


DEFAULT_WINDOW = DEFAULT_DETECTION_WINDOW_MS / 1000


@dataclass(frozen=True, slots=True)
class DetectionPolicy:
    """Which checks run, and the window (seconds) ``tries`` probes share.

    Each probe is followed by ``window / tries`` of listening, so the conflict
    verdict takes ``window``; the gateway check ends at the first answer, or
    after its own ``window`` of silence.
    """

    conflict: bool = True
    gateway: bool = True
    tries: int = 3
    window: float = DEFAULT_WINDOW

    @property
    def interval(self) -> float:
        return self.window / self.tries

    @property
    def enabled(self) -> bool:
        return self.conflict or self.gateway


def detect(
    probes: Probes,
    ifname: str,
    netns: str,
    ips: Sequence[IpamAddress],
    policy: DetectionPolicy,
    link_type: int = 1,
) -> None:
    """Raise CniError 102 / 103 naming the IP (or gateway) and the answering MAC.

    IPoIB links (``link_type`` 32, 20-byte hardware addresses) are skipped with
    a log line: the probes cannot run there, and a silent "no answer" must
    not read as an unreachable gateway.

    With an adapter that has ``probe_nic`` (``NicProbes``) IPv4 and IPv6 are
    probed at the same time, conflict before gateway within each family, so a
    dual-stack NIC waits one conflict window instead of two; otherwise every
    address is probed in turn, all conflicts first.
    """
    if link_type == ARPHRD_INFINIBAND and (policy.conflict or policy.gateway):
        log.info("IP conflict and gateway checks skipped on IPoIB link %s", ifname)
        return
    if not (policy.conflict or policy.gateway):
        return
    addrs = [str(ipaddress.ip_interface(ip.address).ip) for ip in ips]
    checks = (
        [
            GatewayCheck(a, ip.gateway)
            for a, ip in zip(addrs, ips, strict=True)
            if ip.gateway
        ]
        if policy.gateway
        else []
    )
    probe_nic = getattr(probes, "probe_nic", None)
    if probe_nic is None:
        _detect_in_turn(probes, ifname, netns, addrs, checks, policy)
        return
    try:
        report: NicProbeReport = probe_nic(
            ifname,
            addrs if policy.conflict else [],
            checks,
            netns,
            policy.tries,
            policy.interval,
        )
    except NotSupported as exc:
        log.info("IP conflict and gateway checks skipped on %s: %s", ifname, exc)
        return
    if report.conflict is not None:
        raise _conflict_error(ifname, report.conflict.ip, report.conflict.mac)
    for check, answer in report.gateways:
        if answer is None:
            raise _gateway_error(ifname, check, policy)
        log.debug("gateway %s answered from %s", check.gateway, answer.mac)


def _detect_in_turn(
    probes: Probes,
    ifname: str,
    netns: str,
    addrs: Sequence[str],
    checks: Sequence[GatewayCheck],
    policy: DetectionPolicy,
) -> None:
    """``detect`` for adapters with only the per-address ``Probes`` methods."""
    if policy.conflict:
        for addr in addrs:
            try:
                answer = probes.conflict(
                    ifname, addr, netns, policy.tries, policy.interval
                )
            except NotSupported as exc:
                log.info("IP conflict check skipped on %s: %s", ifname, exc)
                break
            if answer is not None:
                raise _conflict_error(ifname, addr, answer.mac)
    for check in checks:
        try:
            answer = probes.gateway(
                ifname, check.ip, check.gateway, netns, policy.tries, policy.interval
            )
        except NotSupported as exc:
            log.info("gateway check skipped on %s: %s", ifname, exc)
            break
        if answer is None:
            raise _gateway_error(ifname, check, policy)
        log.debug("gateway %s answered from %s", check.gateway, answer.mac)


def _conflict_error(ifname: str, addr: str, mac: str) -> CniError:
    return CniError(
        IP_CONFLICT,
        f"ip conflict: {addr} is already used by {mac}",
        f"pod's interface {ifname} with an conflicting ip {addr}, "
        f"{addr} is located at {mac}",
    )


def _gateway_error(
    ifname: str, check: GatewayCheck, policy: DetectionPolicy
) -> CniError:
    return CniError(
        GATEWAY_UNREACHABLE,
        f"gateway {check.gateway} is unreachable",
        f"no ARP/NDP answer from {check.gateway} to {check.ip} on {ifname} "
        f"after {policy.tries} tries in {round(policy.window * 1000)} ms",
    )


class Detection:
    """``detect`` running on a helper thread while the caller goes on.

    The probes only read and send frames on the pod's link from a socket of
    their own (made in the pod's netns by this thread), so they may run beside
    the caller's netlink work; the caller must ``wait()`` before anything that
    depends on the verdict (the announcement, reporting success).
    """

    def __init__(self, target: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._target = target
        self._thread = threading.Thread(target=self._run, name="detect", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target()
        except BaseException as exc:  # noqa: BLE001 - handed to wait()
            self._error = exc

    def join(self) -> None:
        """Block until the probes ended, whatever their verdict."""
        self._thread.join()

    def wait(self) -> None:
        """Block until the verdict is in; raise the CniError of a failed check."""
        self._thread.join()
        if self._error is not None:
            raise self._error


def start_detection(
    probes: Probes,
    ifname: str,
    netns: str,
    ips: Sequence[IpamAddress],
    policy: DetectionPolicy,
    link_type: int = 1,
) -> Detection | None:
    """Start ``detect`` in the background; None when the policy runs no check."""
    if not policy.enabled:
        return None
    return Detection(lambda: detect(probes, ifname, netns, ips, policy, link_type))


def announce(probes: Probes, ifname: str, netns: str, addresses: Sequence[str]) -> None:
    """GARP / unsolicited NA for every address; never fails the ADD."""
    ips = [str(ipaddress.ip_interface(a).ip) for a in addresses]
    if not ips:
        return
    try:
        probes.announce(ifname, ips, netns)
    except (KernelError, OSError) as exc:
        log.warning("announcing %s on %s failed: %s", ips, ifname, exc)
