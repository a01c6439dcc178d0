# SPDX-License-Identifier: Apache-2.0
"""The VF attachment lifecycle shared by the sriov and ib-sriov plugins.

Imports nothing itself (importing ``cni.attach`` must cost nothing). Modules:

- ``attach``: ADD, ``attach(deps, AttachSpec, ipam, hooks)`` -> ``Attached``.
- ``detach``: DEL, ``detach(deps, DetachRequest, ipam)``.
- ``restore``: ``restore(deps, VfState, netns)``, the idempotent undo from the
  record that DEL and a reclaiming ADD run.
- ``check``: CHECK, ``check(...)``.
- ``gc``: GC, ``gc(...)``.
- the record it keeps (``VfState``, cached before the first change) lives in
  ``cni.record``, reached through ``Deps.records``.
- ``device``: ``resolve_vf(sysfs, pci)`` -> ``VfDevice`` (PF, VF index,
  netdev, DPDK mode, RDMA devices) with sriov-cni's messages.
- ``allocation``: per-PCI allocation markers (refuse a VF held by a live
  netns, clear stale ones).
- ``ipam_ahead``: the ADD's IPAM call on a thread beside the PF settings and
  the move; the rollback's release waits for it.
- ``ipam_glue``: ``ipam_request(args, conf)`` and ``to_result(attached)``
  for any netconf satisfying ``IpamConf`` (sriov, ib-sriov);
  ``attachment_request`` (railyard-ipam too).
- ``conf``: the netconf keys both plugins share (``deviceID``, ``link_state``,
  ``mtu``, ``routeTable``, ``rulePriority``), read with the peers' messages.
- ``commands``: what both plugins' ``cmd_*`` share: ``attach_spec``, the deps
  and IPAM client of a command (``resources``), CHECK's prevResult, STATUS
  and GC reporting.
- ``pf``: ``apply_pf_settings`` (undo registered per setting),
  ``restore_pf_settings``.
- ``netdev``: into the pod moved and renamed in one request; back to the
  host (through a temporary netns on a name collision); altname cleanup,
  MAC/MTU/up; find a VF returned from a dead netns.
- ``routing``: addresses, deterministic per-NIC tables, rules and routes.
- ``detection``: IP-conflict and gateway checks, GARP/NA announce.
- ``rdma`` (rdma/ib helper): RDMA device lookup and moves.
"""
