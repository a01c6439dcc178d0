# SPDX-License-Identifier: Apache-2.0
"""A railyard-agent serving test plugins (python -m tests.doubles.agent_host).

The plugins exercise the agent itself: ``echo`` (ADD prints prevResult, DEL
fails naming an env variable), ``sleep`` (ADD waits ``sleep`` seconds from the
netconf), ``crash`` (ADD kills its own process). The server is the production
``cni.agent.server.Agent``; only the table differs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from cni.agent.server import Agent, PluginEntry, PluginTable
from cni.errors import INVALID_CONFIG, CniError
from cni.skel import CmdArgs, PluginFuncs
from cni.types import Result

log = logging.getLogger("tests.agent_host")


def _echo_add(ca: CmdArgs) -> Result | None:
    log.info("echo ADD for %s", ca.container_id)
    return None


def _echo_del(ca: CmdArgs) -> None:
    raise CniError(INVALID_CONFIG, f"PROBE={os.environ.get('PROBE', '')}", ca.ifname)


def _sleep_add(ca: CmdArgs) -> Result | None:
    time.sleep(float(ca.netconf.get("sleep", 1.0)))
    return None


def _crash_add(ca: CmdArgs) -> Result | None:
    os.kill(os.getpid(), signal.SIGKILL)
    return None


def _nothing(ca: CmdArgs) -> None:
    return None


def table() -> PluginTable:
    return {
        "echo": PluginEntry(
            lambda: PluginFuncs(add=_echo_add, del_=_echo_del), "test echo", "echo"
        ),
        "sleep": PluginEntry(
            lambda: PluginFuncs(add=_sleep_add, del_=_nothing), "test sleep", "sleep"
        ),
        "crash": PluginEntry(
            lambda: PluginFuncs(add=_crash_add, del_=_nothing), "test crash", "crash"
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--uid", type=int, action="append", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    uids = frozenset(args.uid if args.uid is not None else [os.geteuid()])
    agent = Agent(table(), args.socket, max_workers=args.max_workers, allowed_uids=uids)
    agent.warm()
    agent.bind()
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
