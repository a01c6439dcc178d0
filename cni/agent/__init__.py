# SPDX-License-Identifier: Apache-2.0
"""The warm path: ``railyard-agent`` (``server``) and the exec'd ``shim``.

- ``shim``: the stdlib-only program installed as each CNI binary; forwards a
  command to the agent, or runs the plugin directly when there is none.
- ``wire``: the agent's side of the shim protocol.
- ``server``: the agent; pre-imported forked workers, one request at a time each.
- ``plugins``: the production table of plugins the agent serves.
- ``cli``: the ``railyard-agent`` command.
"""
