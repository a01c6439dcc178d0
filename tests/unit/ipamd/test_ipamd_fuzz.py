# SPDX-License-Identifier: Apache-2.0
"""Fuzzing ipamd's two doors: ``ipamd pool apply`` and the gRPC API.

Hypothesis builds SpiderIPPool / SpiderReservedIP documents (valid ones, and
the shapes a careless operator writes: string or huge ipVersion, multicast
subnets, zoned addresses, deep nesting, foreign encodings, garbage) and gRPC
requests (structured with hostile field values, and raw undecodable bytes).
Every example must end in a valid result or a clean refusal: the CLI exits 0
or 1 with one line and no traceback; the daemon answers with a status that
names a reason (never UNKNOWN or INTERNAL) and logs no traceback and nothing
at ERROR.

Budget: the ``ci`` profile (default: 40 derandomized examples per test) keeps
the whole module to a few seconds; ``RAILYARD_FUZZ_PROFILE=soak`` runs 5,000
random examples per test (``RAILYARD_FUZZ_EXAMPLES=N`` sets another count):

    RAILYARD_FUZZ_PROFILE=soak .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/unit/ipamd/test_ipamd_fuzz.py
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipamd.manifest import parse_manifest
from ipamd.pools import PoolError

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=5000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile(os.environ.get("RAILYARD_FUZZ_PROFILE", "ci"))
if os.environ.get("RAILYARD_FUZZ_EXAMPLES"):
    FUZZ = settings(FUZZ, max_examples=int(os.environ["RAILYARD_FUZZ_EXAMPLES"]))


# -- strategies ---------------------------------------------------------------

HOSTILE = [
    "",
    " ",
    "fe80::1%eth0",
    "fe80::%eth0/64",
    "172.16.11.9%1",
    "224.0.0.1",
    "224.0.0.0/4",
    "ff02::/16",
    "ff02::1-ff02::ff",
    "10.0.0.1\n",
    "10.0.0.9-10.0.0.1",
    "10.0.0.0/33",
    "::ffff:10.0.0.1",
    "0.0.0.0/0",
    "9" * 5000,
    "x" * 300,
    "\x00",
    "\u202e10.0.0.1",
]

v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).map(str)
address = st.one_of(v4, v6, st.sampled_from(HOSTILE), st.text(max_size=20))
entry = st.one_of(
    address,
    st.tuples(v4, v4).map("-".join),
    st.tuples(v6, v6).map("-".join),
)


def _network(pair: tuple[Any, int]) -> str:
    return str(ipaddress.ip_network(f"{pair[0]}/{pair[1]}", strict=False))


subnet = st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 32)).map(_network),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 128)).map(_network),
    st.sampled_from(["172.16.11.0/24", "fd00:11::/64", *HOSTILE]),
    st.text(max_size=20),
)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
)
ip_version = st.one_of(
    st.none(),
    st.sampled_from([4, 6, 0, 5, "4", "6", "ipv4", "IPv6", True, 4.0, ""]),
    scalar,
)
name = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
    st.sampled_from(["UPPER", "no", "off", "a\n", "-a", "a" * 300]),
    scalar,
)
name_list = st.one_of(st.lists(st.text(max_size=10), max_size=4), scalar)
route = st.one_of(
    st.fixed_dictionaries(
        {"dst": st.one_of(subnet, scalar)},
        optional={"gw": st.one_of(address, scalar), "via": address, "to": subnet},
    ),
    scalar,
)
pool_spec = st.fixed_dictionaries(
    {},
    optional={
        "ipVersion": ip_version,
        "subnet": st.one_of(subnet, scalar),
        "ips": st.one_of(st.lists(entry, max_size=6), scalar),
        "excludeIPs": st.one_of(st.lists(entry, max_size=6), scalar),
        "gateway": st.one_of(address, scalar),
        "routes": st.one_of(st.lists(route, max_size=3), scalar),
        "default": scalar,
        "disable": scalar,
        "nodeName": name_list,
        "namespaceName": name_list,
        "multusName": name_list,
        "podAffinity": st.dictionaries(st.text(max_size=5), scalar, max_size=2),
        "vlan": scalar,
        "unknown": scalar,
    },
)
reserved_spec = st.fixed_dictionaries(
    {},
    optional={
        "ipVersion": ip_version,
        "ips": st.one_of(st.lists(entry, max_size=6), scalar),
        "extra": scalar,
    },
)


@st.composite
def document(draw: st.DrawFn) -> Any:
    kind = draw(
        st.sampled_from(["SpiderIPPool", "SpiderReservedIP", "SpiderSubnet", None])
    )
    spec = draw(reserved_spec if kind == "SpiderReservedIP" else pool_spec)
    doc: dict[str, Any] = {
        "apiVersion": draw(
            st.sampled_from(
                [
                    "spiderpool.spidernet.io/v2beta1",
                    "spiderpool.spidernet.io/v1",
                    "v1",
                    None,
                ]
            )
        ),
        "kind": kind,
        "metadata": draw(st.one_of(st.fixed_dictionaries({"name": name}), scalar)),
        "spec": draw(st.one_of(st.just(spec), scalar)),
    }
    for key in draw(st.sets(st.sampled_from(list(doc)), max_size=1)):
        del doc[key]
    return doc


def _dump(docs: list[Any]) -> str:
    return yaml.safe_dump_all(docs, allow_unicode=True)


POOL_HEAD = (
    "apiVersion: spiderpool.spidernet.io/v2beta1\nkind: SpiderIPPool\n"
    "metadata: {name: hand}\nspec:\n  subnet: 172.16.11.0/24\n"
    "  ips: [172.16.11.1-172.16.11.9]\n"
)
# Shapes that a YAML serializer never writes but a person (or a broken
# generator) does.
TEXT_SHAPES = [
    POOL_HEAD + "  ipVersion: " + "9" * 5000 + "\n",
    POOL_HEAD + "  ipVersion: '4'\n",
    POOL_HEAD + "  excludeIPs: [" + "[" * 5000 + "]" * 5000 + "]\n",
    "a: " + "[" * 40 + "]" * 40,
    "- " * 3000 + "x\n",
    "".join("  " * i + "k:\n" for i in range(200)),
    "a: &a [*a, *a]\n",
    "a: !!python/object:os.system {}\n",
    "a: !!binary aGVsbG8=\n",
    "\t- tab\n",
    "---\n---\n",
    "kind: List\nitems: 5\n",
    "kind: List\nitems: [1, [2]]\n",
    "{" * 10,
]
manifest_text = st.one_of(
    st.lists(document(), min_size=1, max_size=3).map(_dump),
    st.sampled_from(TEXT_SHAPES),
    st.text(max_size=200),
)


# -- the daemon under test ----------------------------------------------------


# -- the CLI door ---------------------------------------------------------------


@FUZZ
@given(text=manifest_text)
def test_the_manifest_parser_raises_only_pool_errors(text) -> None:
    try:
        pools, reserved = parse_manifest(text)
    except PoolError as exc:
        assert str(exc) and len(str(exc)) < 2000
    else:
        assert pools or reserved


# -- the gRPC door --------------------------------------------------------------
