"""What the semaphore models (``test_semaphore_model.py``, ``test_lease_semaphore_model.py``)
share: a state machine whose server steps run a script's own source (or an override of it, by
script name: the unfixed scripts of ``unfixed/``) on the session's ``engine``, bound to that
engine for a run."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from redlease._core.requests import Call

from .engine import RespError, ServerEngine, State

M = TypeVar("M", bound="ScriptedModel")


class ScriptedModel(RuleBasedStateMachine):
    """The server side of a model: ``state`` (the keys), changed by one script call per
    ``run``. ``CHANNELS``: the call's keys that are channels; ``TIMES``: the keys whose numbers
    are server times (``ServerEngine.run``)."""

    engine: ClassVar[ServerEngine]
    overrides: ClassVar[dict[str, bytes]] = {}
    CHANNELS: ClassVar[frozenset[str]] = frozenset()
    TIMES: ClassVar[frozenset[str]] = frozenset()
    state: State

    def run(self, call: Call) -> Any:
        """One server step: ``call`` on the model's state; returns its reply (a script's
        error fails the run)."""
        name = call.script.name
        source = self.overrides.get(name, call.script.source)
        step = self.engine.run(
            self.state, source, call.keys, call.args, channels=self.CHANNELS, times=self.TIMES
        )
        if isinstance(step.reply, RespError):
            raise AssertionError(f"{name} failed: {step.reply}")
        self.state = step.state
        return step.reply


def bound(
    model: type[M], engine: ServerEngine, overrides: dict[str, bytes] | None = None
) -> type[M]:
    """``model`` run on ``engine``, with the scripts of ``overrides`` in place of the real
    ones."""

    class Bound(model):  # type: ignore[valid-type,misc]
        pass

    Bound.engine = engine
    Bound.overrides = overrides or {}
    return Bound


def run_model(model: type[ScriptedModel], engine: ServerEngine, run: settings) -> None:
    """Hypothesis's run of ``model`` on ``engine`` (as many examples and steps as ``run``
    says)."""
    run_state_machine_as_test(bound(model, engine), settings=run)
