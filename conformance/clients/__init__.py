# SPDX-License-Identifier: Apache-2.0
"""Our installed plugins driven by CNI clients we did not write.

- ``test_client_environment.py``: what cnitool, podman and ctr hand a plugin
  process (env on ADD/DEL, CNI_NETNS on DEL), seen by a shell spy over Debian's
  host-device; needs none of our code.
- ``test_cnitool.py``: cnitool 1.1.2 (Debian source) ADD/CHECK/DEL of sriov+rdma
  with CAP_ARGS, and Spiderpool's rendered ``[sriov, rdma, tuning]`` conflist.
- ``test_podman.py``: podman 4.3, CNI backend: one NIC, and an 8-rail pod.
- ``test_ctr.py``: ``ctr run --cni``, whose DEL comes after the netns is gone.
- ``test_multus.py``: Multus's delegation (``multus.py``) of sriov+rdma and
  ib-sriov NADs.

Every test runs on a fresh simulated host (``host.SimHost``: lab + ipamd) and
asserts on kernel state read back with ``ip -j`` (``netview``), on the lab's
recorded PF/RDMA state and on ``ipamd alloc list --json``. Clients are set up by
packaging/clients/ (see its README for what this machine needs and why). The
binaries come from the conformance suite's ``installation`` fixture.
Run: ``.venv/bin/python -m pytest conformance/clients`` as root.
"""
