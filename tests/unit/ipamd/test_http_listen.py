# SPDX-License-Identifier: Apache-2.0
"""``HOST:PORT`` as every HTTP endpoint takes it (ipamd's metrics and probes,
the node's RDMA metrics)."""

from __future__ import annotations

import pytest

from ipamd.http_endpoint import parse_listen


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("0.0.0.0:9435", ("0.0.0.0", 9435)),
        ("[::1]:9090", ("::1", 9090)),
        ("::1:9090", ("::1", 9090)),  # the last colon ends the host
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_host_and_port(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


def test_a_bare_port_takes_the_default_host_only_when_there_is_one() -> None:
    assert parse_listen(":8081", default_host="0.0.0.0") == ("0.0.0.0", 8081)
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(":8081")


@pytest.mark.parametrize("listen", ["no-port", "host:", "host:http", "[::1]", ""])
def test_anything_else_is_refused_naming_the_form(listen: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_listen(listen)
