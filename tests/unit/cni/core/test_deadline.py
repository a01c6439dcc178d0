# SPDX-License-Identifier: Apache-2.0
"""cni.deadline: a hung command ends with a TIMEOUT error JSON, never a hang."""

from __future__ import annotations

import io
import json
import signal
import threading
import time

import pytest

from cni.deadline import Deadline, OutputOnce, resolve_grace, resolve_seconds
from cni.errors import CniError
from cni.rollback import Rollback
from cni.skel import PluginFuncs

from .conftest import base_env, netconf


def sleepy_add(seconds: float, undone: list[str] | None = None):
    log = undone if undone is not None else []

    def add(ca):
        with Rollback() as rb:
            rb.push(lambda: log.append("moved VF back"), "move VF back")
            time.sleep(seconds)
            rb.commit()
        return None

    return add


def test_hung_add_prints_timeout_json_and_rolls_back(run_cni):
    undone: list[str] = []
    funcs = PluginFuncs(add=sleepy_add(10, undone), del_=lambda ca: None)
    start = time.monotonic()
    r = run_cni(base_env("ADD"), netconf("1.0.0"), funcs=funcs, deadline_seconds=0.1)
    assert time.monotonic() - start < 3
    assert r.code == 1
    assert r.json["code"] == 105
    assert r.json["cniVersion"] == "1.0.0"
    assert r.json["msg"] == "command timed out"
    assert "ADD exceeded its 0.1s deadline" in r.json["details"]
    assert undone == ["moved VF back"]


def test_env_deadline_overrides_the_plugins_default(run_cni):
    funcs = PluginFuncs(add=sleepy_add(10), del_=lambda ca: None)
    env = base_env("ADD", RAILYARD_DEADLINE="0.05")
    r = run_cni(env, netconf(), funcs=funcs, deadline_seconds=300)
    assert r.json["code"] == 105


def test_env_deadline_zero_disables_it(run_cni):
    funcs = PluginFuncs(add=sleepy_add(0.1), del_=lambda ca: None)
    env = base_env("ADD", RAILYARD_DEADLINE="0")
    r = run_cni(env, netconf(), funcs=funcs, deadline_seconds=0.02)
    assert r.code == 0, r.stdout


def test_fast_command_is_unaffected_and_the_alarm_is_restored(run_cni):
    before = signal.getsignal(signal.SIGALRM)
    r = run_cni(base_env("ADD"), netconf(), deadline_seconds=5)
    assert r.code == 0
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_plugin_code_catching_exception_cannot_swallow_the_deadline(run_cni):
    def add(ca):
        try:
            time.sleep(10)
        except Exception:  # noqa: BLE001 - the point of the test
            return None
        return None

    r = run_cni(
        base_env("ADD"),
        netconf(),
        funcs=PluginFuncs(add, lambda ca: None),
        deadline_seconds=0.05,
    )
    assert r.json["code"] == 105


# ------------------------------------------------------------ the pieces


def test_output_once_writes_only_the_first_document():
    buf = io.StringIO()
    out = OutputOnce(buf)
    assert out.write("{}\n") is True
    assert out.write('{"code": 105}\n') is False
    assert out.try_write("x", timeout=0.1) is False
    assert buf.getvalue() == "{}\n"


def test_deadline_off_the_main_thread_still_has_the_watchdog():
    exits: list[int] = []
    buf = io.StringIO()
    done = threading.Event()

    def hard_exit(code: int) -> None:
        exits.append(code)
        done.set()

    def body() -> None:
        d = Deadline(
            0.05,
            "DEL",
            OutputOnce(buf),
            lambda e: json.dumps(e.to_json("1.0.0")),
            grace=0.05,
            hard_exit=hard_exit,
        )
        with d:
            done.wait(5)

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert exits == [1]
    assert json.loads(buf.getvalue())["code"] == 105


@pytest.mark.parametrize(
    ("default", "env", "expected"),
    [
        (120.0, {}, 120.0),
        (120.0, {"RAILYARD_DEADLINE": "5"}, 5.0),
        (120.0, {"RAILYARD_DEADLINE": "0"}, None),
        (None, {}, None),
        (120.0, {"RAILYARD_DEADLINE": "soon"}, 120.0),
        (120.0, {"RAILYARD_DEADLINE": "-1"}, 120.0),
    ],
)
def test_resolve_seconds(default, env, expected):
    assert resolve_seconds(default, env) == expected


def test_deadline_can_be_set_per_command():
    per_command = {"GC": 600.0, "ADD": 60.0}
    assert resolve_seconds(per_command, {}, "GC") == 600.0
    assert resolve_seconds(per_command, {}, "ADD") == 60.0
    assert resolve_seconds(per_command, {}, "DEL") == 120.0
    assert resolve_seconds(per_command, {"RAILYARD_DEADLINE": "3"}, "GC") == 3.0


def test_per_command_deadline_applies_in_run_plugin(run_cni):
    funcs = PluginFuncs(add=sleepy_add(10), del_=lambda ca: None)
    r = run_cni(base_env("ADD"), netconf(), funcs=funcs, deadline_seconds={"ADD": 0.05})
    assert r.json["code"] == 105


def test_resolve_grace_defaults_and_overrides():
    assert resolve_grace({}) == 10.0
    assert resolve_grace({"RAILYARD_DEADLINE_GRACE": "0.5"}) == 0.5


def test_timeout_error_is_code_105():
    from cni.deadline import DeadlineExceeded

    err = DeadlineExceeded(2, "GC").to_cni_error()
    assert isinstance(err, CniError)
    assert (err.code, err.details) == (105, "GC exceeded its 2s deadline")
