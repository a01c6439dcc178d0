# SPDX-License-Identifier: Apache-2.0
"""The attachment record of one pod interface (container ID, ifname).

Imports nothing itself. Modules:

- ``vf``: ``VfState`` (the VF part, cached before ADD's first change), its
  ``Stage`` and the PF settings it keeps;
- ``sections``: ``IbSection`` (the GUIDs ib-sriov puts back once the VF is
  home) and ``RdmaSection`` (the RDMA device the chained rdma plugin moved);
- ``store``: ``AttachmentRecords``, the one way to them (``Deps.records``).

Standard library, ``cni.kernel``'s value types and ``cni.state`` only.
"""
