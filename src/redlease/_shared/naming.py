"""Lock names made from a call's arguments, for ``@client.exclusive("order:{order_id}")``."""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentError


def name_maker(
    fn: Callable[..., Any], template: str
) -> Callable[[tuple[Any, ...], dict[str, Any]], str]:
    """A function of ``(args, kwargs)`` giving the lock name for a call of ``fn``.

    Every field of ``template`` must name a parameter of ``fn`` (``{order.id}`` and
    ``{items[0]}`` reach into one); a field that does not is an error now, at decoration time,
    not on the first call.
    """
    if not isinstance(template, str) or not template:
        raise InvalidArgumentError("lock name template must be a non-empty str")
    signature = inspect.signature(fn)
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise InvalidArgumentError(f"lock name template {template!r}: {exc}") from None
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise InvalidArgumentError(
                f"lock name template {template!r}: use parameter names, not positions ({{}})"
            )
        if root not in signature.parameters:
            raise InvalidArgumentError(
                f"lock name template {template!r} refers to {root!r}, which "
                f"{getattr(fn, '__qualname__', fn)!r} has no parameter named; it has "
                f"{', '.join(signature.parameters) or 'none'}"
            )

    def make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return template.format(**bound.arguments)

    return make
