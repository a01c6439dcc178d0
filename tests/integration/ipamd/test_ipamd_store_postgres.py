# SPDX-License-Identifier: Apache-2.0
"""The Store contract, run against every backend (Flower's StateTest pattern): the
tests that run the store contract on a PostgreSQL server.

The rest of them, in-process, are in tests/unit/ipamd/test_ipamd_store_contract.py (the
unit tier).
"""

from __future__ import annotations

import pytest

from ipamd.store import (
    Store,
)
from ipamd.store.sql import SqlStore
from tests.unit.ipamd.test_ipamd_store_contract import (
    SharedStoreContract,
)

pytestmark = pytest.mark.integration


@pytest.mark.postgres
class TestSqlStorePostgres(SharedStoreContract):
    """The same contract on a real PostgreSQL server (tests/postgres.py)."""

    __test__ = True

    @pytest.fixture(autouse=True)
    def _url(self, postgres_url: str) -> None:
        self.url = postgres_url

    def make_store(self) -> Store:
        return SqlStore(self.url)

    def test_password_is_redacted_in_the_description(self) -> None:
        store = SqlStore(self.url.replace("postgres@", "postgres:s3cret@"))
        try:
            assert "s3cret" not in store.describe()
            assert "***" in store.describe()
        finally:
            store.close()
