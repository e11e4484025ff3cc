# SPDX-License-Identifier: MIT
"""``register_tool``: how a wrapper app hands its own tools to ``mp13chat.main``.

There is no global registry. ``register_tool(func, **options)`` only *marks* ``func``
(it stores a frozen ``ToolRegistration`` on the function object) and returns it, so it
also works as a decorator. ``main()`` then builds its ``ChatApp`` with the tools passed
as ``main(tools=[...])`` plus every marked function found in the namespace of the module
that called ``main()`` (and of ``__main__``) — the wrapper script. A tool that is not
bound to a module-level name there (a lambda kept in a list, a function of a helper
called later) must be passed with ``tools=`` or registered on a ``ChatApp`` directly::

    app = mp13chat.ChatApp()
    app.register_tool(search_notes, risk="medium")
    app.main()

The options are those of ``mp13_toolbox.Toolbox.register`` (``name``, ``description``,
``mode``, ``risk``, ``timeout_s``, ...), passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from mp13chat._errors import ChatError

_MARK = "__mp13chat_tool__"


@attrs.frozen
class ToolRegistration:
    """A function to register in the app's toolbox, with ``Toolbox.register`` options."""

    func: Callable[..., Any] = attrs.field(eq=False)
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=dict, hash=False)


def register_tool(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Mark ``func`` as a tool for the REPL that ``mp13chat.main()`` starts.

    Use it before ``main()``, as a call (``register_tool(f, risk="high")``) or a
    decorator (``@register_tool`` / ``@register_tool(risk="high")``). Options are
    those of ``mp13_toolbox.Toolbox.register``. Returns ``func`` unchanged.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise ChatError(f"register_tool needs a function, got {f!r}")
        try:
            setattr(f, _MARK, ToolRegistration(f, options))
        except (AttributeError, TypeError) as exc:
            raise ChatError(
                f"cannot mark {f!r} as a tool (it takes no attributes); pass it to "
                "mp13chat.main(tools=[...]) or ChatApp.register_tool instead"
            ) from exc
        return f

    if func is None:
        return mark
    return mark(func)


def as_registration(tool: Any) -> ToolRegistration:
    """A ``ToolRegistration`` for a marked function, a plain function or a registration."""
    if isinstance(tool, ToolRegistration):
        return tool
    mark = getattr(tool, _MARK, None)
    if isinstance(mark, ToolRegistration):
        return mark
    if callable(tool):
        return ToolRegistration(tool)
    raise ChatError(f"{tool!r} is not a tool; give a function")


def marked_tools(namespaces: Iterable[Mapping[str, Any]]) -> list[ToolRegistration]:
    """Marked functions found in ``namespaces``, once each, in namespace order."""
    seen: set[int] = set()
    out: list[ToolRegistration] = []
    for namespace in namespaces:
        for value in list(namespace.values()):
            mark = getattr(value, _MARK, None) if callable(value) else None
            if isinstance(mark, ToolRegistration) and id(mark.func) not in seen:
                seen.add(id(mark.func))
                out.append(mark)
    return out


def collect_tools(tools: Iterable[Any], namespaces: Iterable[Mapping[str, Any]]) -> list[Any]:
    """``tools`` plus the marked functions of ``namespaces`` that are not among them."""
    explicit = list(tools)
    given = {id(getattr(t, "func", t)) for t in explicit}
    found = [r for r in marked_tools(namespaces) if id(r.func) not in given]
    return [*explicit, *found]
