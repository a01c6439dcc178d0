# SPDX-License-Identifier: Apache-2.0
"""``ipamd db dump`` / ``ipamd db load``: moving a database between stores: the tests
that start a PostgreSQL server.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_db_cli.py (the unit
tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.ipamd.test_ipamd_db_cli import fill, move, same, snapshot

pytestmark = pytest.mark.integration


@pytest.mark.postgres
def test_sqlite_to_postgresql_and_back(
    tmp_path: Path, postgres_url: str, rails_yaml: str
) -> None:
    src, back = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'c.db'}"
    original = fill(src, rails_yaml)
    move(src, postgres_url, tmp_path)
    assert same(snapshot(postgres_url), original)
    move(postgres_url, back, tmp_path)
    assert same(snapshot(back), original)
