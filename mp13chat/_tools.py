# SPDX-License-Identifier: MIT
"""``register_tool``: the options a wrapper app's tool is registered with.

There is no global registry and no scanning of anyone's namespace: a wrapper app hands
its tools over explicitly, as ``mp13chat.main(tools=[lookup, remember])`` or
``ChatApp.register_tool(f)``. ``register_tool(func, **options)`` attaches the
``Toolbox.register`` options (``name``, ``description``, ``mode``, ``risk``,
``timeout_s``, ...) to ``func`` (a frozen ``ToolRegistration`` stored on the function
object) and returns it, so it also works as a decorator; passing the function to
``main(tools=...)`` then registers it with those options::

    @mp13chat.register_tool(risk="medium")
    def remember(note: str) -> str: ...

    mp13chat.main(tools=[remember])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from mp13_toolbox import Toolbox
from mp13chat._errors import ChatError

_MARK = "__mp13chat_tool__"


def check_options(func: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Register ``func`` with ``options`` in a scratch toolbox, so a wrong option (an
    unknown name, ``risk="extreme"``) fails where it is written, not at the app's start."""
    try:
        Toolbox().register(func, **options)
    except TypeError as exc:  # an option Toolbox.register does not take
        raise ChatError(
            f"{exc}; the options are Toolbox.register's: name, description, mode, risk, "
            "timeout_s, approval, replace"
        ) from exc


@attrs.frozen
class ToolRegistration:
    """A function to register in the app's toolbox, with ``Toolbox.register`` options."""

    func: Callable[..., Any] = attrs.field(eq=False)
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, hash=False)


#: What ``main(tools=...)`` takes: a function (marked by ``register_tool`` or not) or a
#: registration.
ToolLike = Callable[..., Any] | ToolRegistration


def register_tool(func: Callable[..., Any] | None = None, /, **options: Any) -> Callable[..., Any]:
    """Attach ``Toolbox.register`` options to ``func`` for ``mp13chat.main(tools=[func])``.

    A call (``register_tool(f, risk="high")``) or a decorator (``@register_tool`` /
    ``@register_tool(risk="high")``). It registers nothing by itself: pass the function
    to ``main(tools=...)`` or ``ChatApp(tools=...)``. Returns ``func`` unchanged.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise ChatError(f"register_tool needs a function, got {f!r}")
        before = getattr(f, _MARK, None)
        try:
            setattr(f, _MARK, ToolRegistration(f, options))
        except (AttributeError, TypeError) as exc:
            raise ChatError(
                f"cannot attach options to {f!r} (it takes no attributes); give them to "
                "ChatApp.register_tool(func, **options) instead"
            ) from exc
        try:
            check_options(f, options)
        except BaseException:  # a refused call leaves the function as it was
            if before is None:
                delattr(f, _MARK)
            else:
                setattr(f, _MARK, before)
            raise
        return f

    if func is None:
        return mark
    return mark(func)


def as_registration(tool: ToolLike) -> ToolRegistration:
    """A ``ToolRegistration`` for a marked function, a plain function or a registration."""
    if isinstance(tool, ToolRegistration):
        return tool
    mark = getattr(tool, _MARK, None)
    if isinstance(mark, ToolRegistration):
        return mark
    if callable(tool):
        return ToolRegistration(tool)
    raise ChatError(f"{tool!r} is not a tool; give a function")
