# SPDX-License-Identifier: MIT
"""What ``Toolbox.register``, ``register_external`` and ``add_builtins`` are given,
checked and made into a ``RegisteredTool``.

Concept
    Registration reads a tool's spec (from a function, an OpenAI-style dict or a
    ``ToolSpec``) and its settings (mode, risk, timeout, approval) into one frozen
    ``RegisteredTool``; the toolbox then adds it to its registry. Nothing here holds
    state or touches a registry.

Invariants
    * Whatever cannot be registered raises ``ToolRegistrationError`` (an unknown builtin
      ``UnknownToolError``) that says what to pass instead; nothing half-registered is left.
    * A parameters schema that uses what argument validation does not check is refused
      here (:mod:`~mp13_toolbox._spec_check`), so such arguments never reach a handler.
    * A function tool with no description registers with a ``ToolDescriptionWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mp13_toolbox._approval import Approval, Risk, as_approval, as_risk
from mp13_toolbox._builtins import BUILTINS
from mp13_toolbox._errors import (
    ToolboxError,
    ToolDescriptionWarning,
    ToolRegistrationError,
    UnknownToolError,
)
from mp13_toolbox._registry import RegisteredTool, Signature, ToolKind
from mp13_toolbox._scopes import as_mode
from mp13_toolbox._spec_check import spec_problems
from mp13_toolbox._types import ToolCall, ToolMode, ToolSpec
from mp13_toolbox._validate import check_limit


def new_tool(
    spec: ToolSpec,
    kind: ToolKind,
    handler: Callable[..., Any],
    signature: Signature | None,
    mode: ToolMode | str,
    risk: Risk | str,
    timeout_s: float | None,
    approval: Approval | str | None,
) -> RegisteredTool:
    """One tool, its settings checked and normalised (both ``register``s)."""
    return RegisteredTool(
        spec=spec,
        mode=as_mode(mode),
        risk=as_risk(risk),
        approval=as_approval(approval),
        timeout_s=as_timeout(timeout_s),
        kind=kind,
        handler=handler,
        signature=signature,
    )


def external_spec(
    spec: Mapping[str, Any] | ToolSpec, handler: Callable[[ToolCall], object]
) -> ToolSpec:
    """The ``ToolSpec`` ``register_external`` registers, its schema one validation checks."""
    if not callable(handler):
        raise ToolRegistrationError(
            f"register_external() needs a callable handler, got {handler!r}"
        )
    try:
        tool_spec = spec if isinstance(spec, ToolSpec) else ToolSpec.from_openai(dict(spec))
    except ToolRegistrationError:
        raise  # ToolSpec says what is wrong itself
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ToolRegistrationError(
            f"cannot read the tool spec {spec!r}: {exc!r}; pass {{'name': ..., 'description': "
            "..., 'parameters': {...}} or the OpenAI {'type': 'function', 'function': {...}}"
        ) from exc
    if (
        not isinstance(tool_spec.parameters, dict)
        or tool_spec.parameters.get("type", "object") != "object"
    ):
        raise ToolRegistrationError(
            f"tool {tool_spec.name!r}: parameters must be a JSON schema of type 'object'"
        )
    unchecked = spec_problems(tool_spec.parameters)
    if unchecked:
        raise ToolRegistrationError(
            f"tool {tool_spec.name!r}: its parameters schema uses what argument validation "
            f"does not check, so arguments that break it would reach the handler: "
            f"{'; '.join(unchecked[:5])}. Remove it and check that in the handler, or say it "
            "with the keywords that validation checks (listed in help(mp13_toolbox.validate))"
        )
    return tool_spec


def builtin_names(names: str | Iterable[str] | None) -> list[str]:
    """The builtins ``add_builtins`` was asked for: all, one, or those named."""
    if names is None:
        names = BUILTINS
    if not isinstance(names, (str, Iterable)):
        raise ToolboxError(f"add_builtins takes builtin names, not {names!r}")
    chosen = [names] if isinstance(names, str) else list(names)
    unknown = [n for n in chosen if n not in BUILTINS]
    if unknown:
        raise UnknownToolError(
            f"no builtin tool named {', '.join(map(repr, unknown))}; "
            f"builtins: {', '.join(BUILTINS)}"
        )
    return chosen


def warn_undescribed(name: str, stacklevel: int) -> None:
    """Say that tool ``name`` was registered with no description, at the caller's line.

    A warning, not an error: the tool works, and its name and parameters may say enough.
    But the description is what a model reads to choose a tool and how to call it, and an
    empty one is almost always a forgotten docstring, which nothing else would reveal.
    """
    warnings.warn(
        f"tool {name!r} has no description, so the model is shown only its name and "
        "parameters; give the function a docstring (its first paragraph is the "
        "description) or pass description=... to register() (description='' keeps it "
        "empty without this warning)",
        ToolDescriptionWarning,
        stacklevel=stacklevel,
    )


def as_timeout(value: float | None) -> float | None:
    check_limit(value, "number", ToolRegistrationError, "timeout_s must be > 0 seconds or None")
    return value
