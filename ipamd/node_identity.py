# SPDX-License-Identifier: Apache-2.0
"""Which node a caller proves it is, for ``ReconcileNode``.

A node's account of its attachments releases addresses, so ipamd takes it
only from the node itself:

- over mutual TLS, the node is the client certificate's subject CN, bare
  (``gpu-node-7``) or in the Kubernetes node-identity form kubelets use
  (``system:node:gpu-node-7``); a certificate shared by every node proves
  no node, and its reports are refused with the CN named;
- over the unix socket (0600, root only, on the host ipamd runs on), the
  caller is on that host: it may report for ipamd's own node name
  (``--node-name``, default $RAILYARD_NODE_NAME or the hostname, the same
  rule the plugins use to name the node of an allocation), nothing else;
- TLS without a client certificate proves nothing.

Standard library only: the servicer hands in gRPC's auth context as a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

KUBERNETES_NODE_PREFIX = "system:node:"


def proven_node(
    auth: Mapping[str, Sequence[bytes]], peer: str, local_node: str
) -> tuple[str, str]:
    """(the node the caller proves it is, how) or ("", why not)."""
    common_names = auth.get("x509_common_name") or []
    if common_names:
        cn = common_names[0].decode(errors="replace")
        return cn.removeprefix(KUBERNETES_NODE_PREFIX), f"certificate CN {cn!r}"
    if peer.startswith("unix:"):
        if not local_node:
            return "", "ipamd has no --node-name for its unix socket's callers"
        return local_node, f"unix socket of node {local_node!r}"
    return "", "no client certificate (mutual TLS) names the caller's node"
