# SPDX-License-Identifier: Apache-2.0
"""cni.rollback: reverse order, every undo runs, the original error wins."""

from __future__ import annotations

import logging

import pytest

from cni.rollback import Rollback


class StepFailed(Exception):
    pass


def test_undos_run_newest_first_on_failure():
    done: list[str] = []
    with pytest.raises(StepFailed):
        with Rollback() as rb:
            for step in ("save cache", "move VF", "set MAC"):
                rb.push(lambda s=step: done.append(s), f"undo {step}")
            raise StepFailed("set MTU")
    assert done == ["set MAC", "move VF", "save cache"]


def test_commit_drops_every_undo():
    done: list[str] = []
    with Rollback() as rb:
        rb.push(lambda: done.append("x"), "x")
        rb.commit()
    assert done == []
    assert len(rb) == 0


def test_a_failing_undo_is_logged_and_the_rest_still_run(caplog):
    done: list[str] = []

    def broken() -> None:
        raise OSError(16, "Device or resource busy")

    caplog.set_level(logging.INFO, logger="cni.rollback")
    with pytest.raises(StepFailed) as e:
        with Rollback() as rb:
            rb.push(lambda: done.append("restore name"), "restore name")
            rb.push(broken, "restore MAC")
            rb.push(lambda: done.append("release IP"), "release IP")
            raise StepFailed("gateway unreachable")
    assert done == ["release IP", "restore name"]
    assert str(e.value) == "gateway unreachable"  # not the undo's error
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "restore MAC failed" in errors[0].getMessage()
    assert errors[0].exc_info is not None
    assert [d for d, _ in rb.failures] == ["restore MAC"]


def test_undo_failures_are_noted_on_the_original_exception():
    with pytest.raises(StepFailed) as e:
        with Rollback() as rb:
            rb.push(lambda: 1 / 0, "restore VLAN")
            raise StepFailed("boom")
    assert e.value.__notes__ == ["rollback incomplete: restore VLAN: division by zero"]


def test_leaving_without_commit_unwinds_and_warns(caplog):
    done: list[str] = []
    with Rollback() as rb:
        rb.push(lambda: done.append("undo"), "undo")
    assert done == ["undo"]
    assert any("without commit" in r.getMessage() for r in caplog.records)


def test_an_interrupt_inside_an_undo_does_not_stop_the_others():
    done: list[str] = []

    def interrupted() -> None:
        raise KeyboardInterrupt

    rb = Rollback()
    rb.push(lambda: done.append("first"), "first")
    rb.push(interrupted, "second")
    failures = rb.unwind()
    assert done == ["first"]
    assert [d for d, _ in failures] == ["second"]


def test_push_after_commit_is_a_programming_error():
    rb = Rollback()
    rb.commit()
    with pytest.raises(RuntimeError):
        rb.push(lambda: None, "late")


def test_descriptions_list_pending_steps_oldest_first():
    rb = Rollback()
    rb.push(lambda: None, "a")
    rb.push(lambda: None, "b")
    assert rb.descriptions == ["a", "b"]
    rb.unwind()
    assert rb.descriptions == []


def test_uses_the_given_logger_adapter(caplog):
    adapter = logging.LoggerAdapter(logging.getLogger("rc.test"), {})
    caplog.set_level(logging.INFO, logger="rc.test")
    rb = Rollback(adapter)
    rb.push(lambda: None, "restore MTU")
    rb.unwind()
    assert [r.name for r in caplog.records] == ["rc.test"]
