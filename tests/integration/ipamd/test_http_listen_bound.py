# SPDX-License-Identifier: Apache-2.0
"""``HOST:PORT`` as every HTTP endpoint takes it (ipamd's metrics and probes,: the
tests that bind a socket.

The rest of them, in-process, are in tests/unit/ipamd/test_http_listen.py (the unit
tier).
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import pytest

from ipamd.http_endpoint import HttpEndpoint

pytestmark = pytest.mark.integration


def test_an_endpoint_names_its_bound_address_as_a_url_takes_it() -> None:
    v4 = HttpEndpoint("127.0.0.1", 0, BaseHTTPRequestHandler, "test-v4")
    try:
        assert v4.address == f"127.0.0.1:{v4.port}" and v4.port > 0
    finally:
        v4.stop()
    v6 = HttpEndpoint("::1", 0, BaseHTTPRequestHandler, "test-v6")
    try:
        assert v6.address == f"[::1]:{v6.port}"
    finally:
        v6.stop()
