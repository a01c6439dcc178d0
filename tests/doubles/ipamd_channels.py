# SPDX-License-Identifier: Apache-2.0
"""Channels ``ipamd.client.open_ahead`` opened and no client took: closed
after each test, so one test's channel is never handed to the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ipamd import client as transport


@pytest.fixture(autouse=True)
def no_channels_left() -> Iterator[None]:
    yield
    transport._KEEP_CHANNELS[0] = False
    for channel in transport._OPENED_AHEAD.values():
        channel.close()
    transport._OPENED_AHEAD.clear()
