# SPDX-License-Identifier: Apache-2.0
"""The recording seam keeps VF tables and RDMA locations across plugin processes: the
tests that read settings from another process.

The rest of them, in-process, are in tests/unit/sim/test_sim_recording.py (the unit
tier).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from railyard_sim.recording import (
    RecordingVfOps,
    vf_table,
)
from tests.unit.sim.test_sim_recording import (
    manifest,  # noqa: F401
    pf,  # noqa: F401
)

pytestmark = pytest.mark.integration


def test_settings_written_by_one_process_are_read_by_another(
    tmp_path: Path,
    pf: str,  # noqa: F811 - the fixture imported above
) -> None:
    code = (
        "import sys; from railyard_sim.recording import RecordingVfOps as R; "
        f"o = R(sys.argv[1]); o.set_vlan({pf!r}, 0, 100, 3, 0x88a8); "
        f"o.set_mac({pf!r}, 0, '02:AA:BB:CC:DD:EE'); o.set_trust({pf!r}, 0, True); "
        f"o.set_rate({pf!r}, 0, 10, 100); o.set_link_state({pf!r}, 0, 2)"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    info = RecordingVfOps(tmp_path).get_vf(pf, 0)
    assert (info.vlan, info.qos, info.vlan_proto) == (100, 3, 0x88A8)
    assert info.mac == "02:aa:bb:cc:dd:ee"
    assert info.trust is True and info.spoofchk is True
    assert (info.min_tx_rate, info.max_tx_rate, info.link_state) == (10, 100, 2)
    assert vf_table(tmp_path, pf)[1].vlan == 0
