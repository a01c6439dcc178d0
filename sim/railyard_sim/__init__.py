# SPDX-License-Identifier: Apache-2.0
"""The simulated SR-IOV/RDMA host (``railyard-sim``): a lab, its launchers, a runtime.

A separate distribution (``railyard-sim``, the ``sim`` extra of
``railyard-cni``): it imports ``cni``, never the reverse, and a node gets it
only when asked (``packaging/install.sh --with-sim``).
"""

VERSION = "0.1.0"
