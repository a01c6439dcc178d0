# SPDX-License-Identifier: Apache-2.0
"""An IPAM that was never reached leaves nothing behind (issue 10, last row): the
tests that exec a delegated IPAM binary.

The rest of them, in-process, are in tests/unit/cni/attach/test_ipam_never_reached.py
(the unit tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cni.errors import TRY_AGAIN_LATER
from cni.ipam import IpamError
from cni.ipam.delegate import DelegateIpam

pytestmark = pytest.mark.integration


def test_delegate_is_bounded_by_the_deadline(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    ipam = DelegateIpam(
        {"ipam": {"type": "slow"}}, {"CNI_PATH": str(tmp_path)}, budget=lambda: 0.3
    )
    with pytest.raises(IpamError) as info:
        ipam.release("n", "c1", "net1")
    assert info.value.code == TRY_AGAIN_LATER
    assert "0.3s" in info.value.details
    spent = DelegateIpam(
        {"ipam": {"type": "slow"}}, {"CNI_PATH": str(tmp_path)}, budget=lambda: 0.0
    )
    with pytest.raises(IpamError) as info:
        spent.release("n", "c1", "net1")
    assert info.value.unchanged
