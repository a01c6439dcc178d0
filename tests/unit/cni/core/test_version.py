# SPDX-License-Identifier: Apache-2.0
"""cni.version: parsing and comparison as Go pkg/version, conflist selection."""

from __future__ import annotations

import pytest

from cni import version
from cni.errors import CniError


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("", (0, 1, 0)), ("1", (1, 0, 0)), ("0.4", (0, 4, 0)), ("1.1.0", (1, 1, 0))],
)
def test_parse_fills_missing_parts_like_go(text, parsed):
    assert version.parse(text) == parsed


@pytest.mark.parametrize("text", ["1.0.0.0", "a.b.c", "1.x", "1..0", "v1.0.0"])
def test_parse_rejects_malformed_versions(text):
    with pytest.raises(ValueError):
        version.parse(text)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1.0.0", "0.4.0", True),
        ("0.4.0", "0.4.0", True),
        ("0.3.1", "0.4.0", False),
        ("0.10.0", "0.9.0", True),  # numeric, not lexical
        ("1.1.0", "1.0.10", True),
    ],
)
def test_greater_than_or_equal_compares_numerically(a, b, expected):
    assert version.greater_than_or_equal(a, b) is expected


def test_all_is_ordered_and_ends_at_current():
    parsed = [version.parse(v) for v in version.ALL]
    assert parsed == sorted(parsed)
    assert version.ALL[-1] == version.CURRENT == "1.1.0"


@pytest.mark.parametrize("v", version.ALL)
def test_check_compatible_accepts_every_supported_version(v):
    version.check_compatible(v)


def test_check_compatible_is_an_exact_string_match():
    # Go's Reconciler.CheckRaw: "1.0" is not "1.0.0".
    with pytest.raises(CniError) as e:
        version.check_compatible("1.0")
    assert e.value.code == 1
    assert e.value.details.startswith('config is "1.0", plugin supports ["0.3.0"')


def test_config_version_defaults_to_0_1_0_and_rejects_non_strings():
    assert version.config_version({}) == "0.1.0"
    assert version.config_version({"cniVersion": ""}) == "0.1.0"
    assert version.config_version({"cniVersion": "0.4.0"}) == "0.4.0"
    with pytest.raises(CniError) as e:
        version.config_version({"cniVersion": 1})
    assert e.value.code == 6


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"cniVersion": "1.0.0", "cniVersions": ["1.1.0", "0.4.0"]}, "1.1.0"),
        ({"cniVersion": "1.0.0"}, "1.0.0"),
        ({"cniVersions": ["0.4.0", "9.0.0", "1.0.0"]}, "1.0.0"),
        ({"cniVersions": ["2.0.0"], "cniVersion": "0.2.0"}, None),
        ({"cniVersions": ["bad", 3], "cniVersion": "0.3.1"}, "0.3.1"),
    ],
)
def test_highest_common_picks_the_highest_supported_declared_version(conf, expected):
    assert version.highest_common(conf) == expected


def test_version_info_is_the_version_command_object():
    assert version.version_info(("1.0.0",)) == {
        "cniVersion": "1.1.0",
        "supportedVersions": ["1.0.0"],
    }


def test_go_quote_list_matches_go_percent_q():
    assert version.go_quote_list(["a", 'b"c']) == '["a" "b\\"c"]'
