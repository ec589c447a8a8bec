"""Every exception reactq defines derives from ReactqError, and survives a process hop.

The test imports every module of the package (walking ``reactq``, so the linked
worker, producer and shared folders too) and looks at each Exception subclass
defined there.
"""

from __future__ import annotations

import importlib
import json
import pickle
import pkgutil
from types import ModuleType

import pytest

import reactq
from reactq.producer.gateway.errors import GatewayError
from reactq.shared.error_codes import ERROR_CODES
from reactq.shared.errors import ReactqError

# Modules that cannot be imported on their own, with the reason.
NOT_IMPORTABLE = {
    "reactq.shared.state.migrations.env": "alembic's env script: it runs migrations on import, "
    "inside alembic's context only",
}

# Exceptions allowed outside the tree, with the reason. Keep this short.
OUTSIDE_THE_TREE = {
    "reactq.worker.agent.cancel.RunCancelled": "internal control flow of a run: raised while "
    "the run waits and caught by the run itself, which ends with status cancelled",
    "reactq.shared.state.sql.sqlite_lanes._Cancelled": "internal control flow of a SQLite "
    "transaction: raised inside it to roll it back when its caller was cancelled; the "
    "caller sees CancelledError",
    "reactq.worker.agent.suspend.Suspended": "internal control flow between the run and "
    "the drain: the base of the two below, which the loop and the runner let through",
    "reactq.worker.agent.suspend.AwaitingApproval": "internal control flow between the run and "
    "the drain: the run stopped at tool calls waiting for a person; the drain parks the turn",
    "reactq.worker.agent.suspend.AwaitingChildren": "internal control flow between the run and "
    "the drain: the run stopped at delegations whose child turns still run; the drain parks "
    "the turn",
    "reactq.worker.agent.run_state.OverBudget": "internal control flow of a run: raised when a "
    "budget is spent and caught by the run itself, which ends with BudgetExceededError",
}


def _modules() -> list[ModuleType]:
    found = [reactq]
    for info in pkgutil.walk_packages(reactq.__path__, "reactq."):
        if info.name in NOT_IMPORTABLE:
            continue
        found.append(importlib.import_module(info.name))
    return found


def _exceptions() -> dict[str, type[BaseException]]:
    classes: dict[str, type[BaseException]] = {}
    for module in _modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                classes[f"{value.__module__}.{value.__qualname__}"] = value
    return classes


EXCEPTIONS = _exceptions()
TREE = sorted(
    (cls for cls in EXCEPTIONS.values() if issubclass(cls, ReactqError)),
    key=lambda cls: cls.__qualname__,
)


def test_the_walk_sees_the_whole_package() -> None:
    names = set(EXCEPTIONS)
    assert "reactq.shared.errors.ReactqError" in names
    assert "reactq.producer.gateway.errors.GatewayError" in names  # through the symlink
    assert "reactq.worker.definitions.AgentConfigError" in names
    assert len(TREE) >= 30


def test_every_exception_derives_from_reactq_error() -> None:
    outside = sorted(
        name
        for name, cls in EXCEPTIONS.items()
        if not issubclass(cls, ReactqError) and name not in OUTSIDE_THE_TREE
    )
    assert outside == [], (
        "these exceptions do not derive from reactq.ReactqError (derive them from it, "
        f"or list them in OUTSIDE_THE_TREE with a reason): {outside}"
    )


def test_the_list_of_exceptions_is_not_stale() -> None:
    for name in OUTSIDE_THE_TREE:
        assert name in EXCEPTIONS, f"{name} no longer exists: drop it from OUTSIDE_THE_TREE"
        assert not issubclass(EXCEPTIONS[name], ReactqError), f"{name} is in the tree now"


def test_each_code_is_declared_once() -> None:
    owners: dict[str, str] = {}
    for cls in TREE:
        code = cls.__dict__.get("code")
        if code is None:
            continue  # inherits its parent's code
        assert code not in owners, f"{cls.__qualname__} and {owners[code]} both declare {code!r}"
        owners[code] = cls.__qualname__


def test_every_code_is_in_the_registry() -> None:
    """Issue 22, item 5: each code says whether it is worth a retry, and what it means."""
    registered = {entry.code for entry in ERROR_CODES}
    missing = sorted(
        f"{cls.__qualname__}: {cls.code}" for cls in TREE if cls.code not in registered
    )
    assert missing == [], f"add these codes to reactq.shared.error_codes: {missing}"


@pytest.mark.parametrize("cls", TREE, ids=lambda cls: cls.__qualname__)
def test_errors_cross_a_process_boundary(cls: type[ReactqError]) -> None:
    # Details as keywords, where the class takes any (GatewayError takes its own few).
    details = {"turn_id": "t_1"} if cls.__init__ is ReactqError.__init__ else {}
    error = cls("boom", **details)
    assert isinstance(error, reactq.ReactqError)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert (again.message, again.details, str(again)) == ("boom", error.details, "boom")
    assert details.items() <= again.details.items()
    # Celery re-creates an exception from its args alone.
    rebuilt = cls(*error.args)
    assert type(rebuilt) is cls and rebuilt.message == "boom"
    json.dumps(error.to_dict())


def test_gateway_error_keeps_its_http_fields() -> None:
    error = GatewayError("no such turn", status=404, error_code="turn_not_found", field="path")
    again = pickle.loads(pickle.dumps(error))
    assert (again.status, again.error_code, again.field, again.message) == (
        404,
        "turn_not_found",
        "path",
        "no such turn",
    )
    assert again.to_dict() == {"code": "turn_not_found", "message": "no such turn", "field": "path"}
    assert GatewayError(*error.args).status == 500
