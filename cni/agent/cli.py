# SPDX-License-Identifier: Apache-2.0
"""``railyard-agent``: run the node agent (see ``cni.agent.server``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

SOCKET_ENV = "RAILYARD_AGENT_SOCKET"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="railyard-agent",
        description="Node agent: runs the sriov, ib-sriov, rdma and railyard-ipam "
        "commands the CNI shims forward to it.",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        default=Path(
            os.environ.get(SOCKET_ENV, "") or "/run/railyard/agent/agent.sock"
        ),
        help="unix socket to listen on (its directory is made 0700; "
        f"default ${SOCKET_ENV} or /run/railyard/agent/agent.sock)",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=16,
        help="requests run at the same time; more wait in the backlog (default 16)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s railyard-agent: %(message)s",
        stream=sys.stderr,
    )
    if args.max_workers < 1:
        logging.error("--max-workers must be at least 1")
        return 2
    # The parent never opens a channel; each forked worker makes its own, so
    # gRPC's fork handlers (costly, and only needed for shared channels) stay off.
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    from cni.agent.plugins import PRELOAD, production_table
    from cni.agent.server import Agent

    agent = Agent(
        production_table(),
        socket_path=args.socket,
        max_workers=args.max_workers,
        preload=PRELOAD,
    )
    agent.warm()
    try:
        agent.bind()
    except OSError as exc:
        logging.error("cannot listen on %s: %s", args.socket, exc)
        return 1
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
