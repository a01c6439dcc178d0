# SPDX-License-Identifier: Apache-2.0
"""A fault-injecting proxy around any adapter (real ``NetlinkLinks``, probes...).

Every call is forwarded to the wrapped object and recorded; a method armed
with ``fail(name, exc)`` raises ``exc`` instead of running, optionally only
for calls whose positional or keyword arguments match, and only ``times``
times. This drives each rollback path against the real kernel without
patching pyroute2: the step before the fault really happened, the fault
stands for a kernel refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Fault:
    exc: BaseException
    times: int | None
    when: Callable[..., bool] | None
    skip: int = 0


@dataclass
class FaultProxy:
    """``FaultProxy(real)`` behaves like ``real`` until a method is armed."""

    target: Any
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(
        default_factory=list
    )
    _faults: dict[str, _Fault] = field(default_factory=dict)

    def fail(
        self,
        method: str,
        exc: BaseException,
        times: int | None = 1,
        when: Callable[..., bool] | None = None,
        skip: int = 0,
    ) -> None:
        """Make ``method`` raise ``exc``; ``skip`` matching calls pass first."""
        if not callable(getattr(self.target, method, None)):
            raise AttributeError(f"{type(self.target).__name__} has no {method}()")
        self._faults[method] = _Fault(exc, times, when, skip)

    def clear(self) -> None:
        self._faults.clear()

    def names(self) -> list[str]:
        """The methods called so far, in order."""
        return [name for name, _a, _k in self.calls]

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            fault = self._faults.get(name)
            if fault is not None and (
                fault.when is None or fault.when(*args, **kwargs)
            ):
                if fault.skip > 0:
                    fault.skip -= 1
                else:
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            del self._faults[name]
                    raise fault.exc
            return attr(*args, **kwargs)

        return call
