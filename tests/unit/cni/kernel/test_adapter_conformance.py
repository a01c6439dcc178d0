# SPDX-License-Identifier: Apache-2.0
"""Each kernel adapter implements its Protocol method for method (names, params,
defaults); extensions are keyword-only with defaults, so callers of the Protocol
can never tell the difference."""

from __future__ import annotations

import inspect
from typing import Generic, Protocol

import pytest

from cni.kernel import Links, Netns, NicProbes, Probes, VfOps
from cni.kernel.links import NetlinkLinks
from cni.kernel.netns import Namespaces
from cni.kernel.probes import RawProbes
from cni.kernel.vf import NetlinkVfOps

PAIRS = [
    (Links, NetlinkLinks),
    (Netns, Namespaces),
    (Probes, RawProbes),
    (NicProbes, RawProbes),
    (VfOps, NetlinkVfOps),
]


def protocol_methods(proto: type) -> list[str]:
    """Public methods of ``proto`` and of the Protocols it extends."""
    bases = [k for k in proto.__mro__ if k not in (object, Protocol, Generic)]
    return sorted(
        {
            name
            for klass in bases
            for name, value in vars(klass).items()
            if callable(value) and not name.startswith("_")
        }
    )


@pytest.mark.parametrize(("proto", "adapter"), PAIRS, ids=lambda x: x.__name__)
def test_adapter_matches_protocol_signatures(proto: type, adapter: type):
    names = protocol_methods(proto)
    assert len(names) >= 3
    for name in names:
        want = list(inspect.signature(getattr(proto, name)).parameters.values())
        have = list(inspect.signature(getattr(adapter, name)).parameters.values())
        assert [(p.name, p.default, p.kind) for p in have[: len(want)]] == [
            (p.name, p.default, p.kind) for p in want
        ], f"{adapter.__name__}.{name}"
        for extra in have[len(want) :]:
            assert extra.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}({extra})"
            assert extra.default is not inspect.Parameter.empty, f"{name}({extra})"
