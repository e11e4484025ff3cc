# SPDX-License-Identifier: Apache-2.0
"""The format registry: format name -> ``Profile``; the built-ins plus formats users add.

Built-in formats are listed once, in ``_DETECT_ORDER``: from the most specific
template signature to the most generic (``<tool_call>`` alone means hermes),
which makes detection a data lookup instead of an if-chain. Each one's
``PROFILE`` lives in the private module named after it (``_hermes``), imported
on first use, so importing the package loads no format it does not need.

Formats users add (``register_format``) live in the one process-wide
``FormatRegistry``, the documented exception to "no module-level mutable
state": an engine resolves its format by name when it loads, so a format must
be findable from anywhere in the process, the way a codec or entry point is.
Invariants: the registry only changes through ``register`` / ``unregister``
(under a lock, replacing an immutable snapshot, so readers never see a half
update); built-ins can be shadowed (``replace=True``) but never removed, and
unregistering a shadowing format brings the built-in back; a registration is
undone by its handle (``with register_format(p): ...`` scopes it, which is how
tests keep from leaking formats into each other). User formats are detected
before the built-ins, the most recently registered first.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Sequence
from types import MappingProxyType

from mp13_engine._errors import ToolFormatError
from mp13_engine.toolcalls._profile import Profile
from mp13_engine.toolcalls._types import require_list, require_text
from mp13_toolbox import ToolCall, did_you_mean

#: The built-in formats, from the most specific template signature to the most generic;
#: each one's ``PROFILE`` lives in the private module of its name (``hermes``: ``_hermes``).
_DETECT_ORDER: tuple[str, ...] = (
    "seed_oss",
    "minimax_m2",
    "qwen3_coder",
    "glm45",
    "kimi_k2",
    "harmony",
    "deepseek_v31",
    "deepseek_v3",
    "mistral_v11",
    "mistral",
    "functiongemma",
    "granite_20b_fc",
    "phi4_mini",
    "granite",
    "internlm",
    "minimax",
    "jamba",
    "xlam",
    "gemma_tool_code",
    "llama4_pythonic",
    "pythonic",
    "llama3_json",
    "hermes",
)
_BUILTIN = frozenset(_DETECT_ORDER)

#: The format the engine uses for a chat template that cannot show tools at all (no
#: ``tools=`` support and no known call syntax): Hermes' ``<tool_call>{json}</tool_call>``,
#: the most widely trained convention. Its tools go into the system prompt
#: (``tools_system_prompt``), past calls into the assistant content.
DEFAULT_FORMAT = "hermes"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class FormatHandle:
    """One registration: ``unregister()`` undoes it; as a context manager it scopes it."""

    def __init__(self, registry: FormatRegistry, profile: Profile) -> None:
        self._registry = registry
        self.profile = profile

    @property
    def name(self) -> str:
        """The registered format's name."""
        return self.profile.name

    def unregister(self) -> None:
        """Remove this registration (a no-op when it is already gone or was replaced)."""
        self._registry.unregister(self.name, only=self.profile)

    def __enter__(self) -> FormatHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unregister()

    def __repr__(self) -> str:
        return f"FormatHandle({self.name!r})"


class FormatRegistry:
    """Format name -> ``Profile``: the built-ins plus registered formats (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._user: MappingProxyType[str, Profile] = MappingProxyType({})

    def names(self) -> list[str]:
        return sorted(_BUILTIN | set(self._user))

    def get(self, name: str) -> Profile:
        user = self._user.get(name) if isinstance(name, str) else None
        if user is not None:
            return user
        if not isinstance(name, str) or name not in _BUILTIN:
            raise ToolFormatError(
                f"unknown tool-call format {name!r}{self._suggestion(name)}; use one of: "
                f"{', '.join(self.names())} (formats are named by wire syntax, not by model: "
                "leave tool_format unset to detect it from the chat template, or add yours "
                "with mp13_engine.toolcalls.register_format)"
            )
        profile: Profile = importlib.import_module(f"mp13_engine.toolcalls._{name}").PROFILE
        return profile

    def _suggestion(self, name: object) -> str:
        """`` (did you mean 'hermes'?)`` for a typo or a case slip of a known name, else ``""``.

        The cutoff is high on purpose: a family name close to a format of another
        family (``qwen3`` / ``qwen3_coder``: Qwen3 itself writes hermes) is not a typo,
        and suggesting that format would send the user the wrong way.
        """
        return did_you_mean(name, self.names(), cutoff=0.8) if isinstance(name, str) else ""

    def detect_order(self) -> list[str]:
        return [*reversed(list(self._user)), *(n for n in _DETECT_ORDER if n not in self._user)]

    def register(self, profile: Profile, *, replace: bool = False) -> FormatHandle:
        _check(profile)
        with self._lock:
            taken = profile.name in self._user or profile.name in _BUILTIN
            if taken and not replace:
                where = "built-in" if profile.name in _BUILTIN else "registered"
                raise ToolFormatError(
                    f"tool-call format {profile.name!r} is already {where}; pick another "
                    "name, or pass replace=True to use yours instead while it is registered"
                )
            user = {k: v for k, v in self._user.items() if k != profile.name}
            user[profile.name] = profile  # re-registering moves it to the front of detection
            self._user = MappingProxyType(user)
        return FormatHandle(self, profile)

    def unregister(self, name: str, *, only: Profile | None = None) -> None:
        with self._lock:
            current = self._user.get(name) if isinstance(name, str) else None
            if current is None:
                if only is not None:
                    return
                builtin = isinstance(name, str) and name in _BUILTIN
                what = "a built-in format" if builtin else "not registered"
                raise ToolFormatError(
                    f"cannot unregister tool-call format {name!r}: it is {what}; only formats "
                    "added with register_format can be removed"
                )
            if only is not None and current is not only:
                return
            self._user = MappingProxyType({k: v for k, v in self._user.items() if k != name})


def _check(profile: object) -> None:
    """Refuse a profile the stream machine could not run, before anyone relies on it."""
    if not isinstance(profile, Profile):
        raise ToolFormatError(
            f"register_format needs a toolcalls.Profile, got {type(profile).__name__}; build "
            "one with Profile(name=..., openers=(Opener(...),), decode=..., render=...)"
        )
    if not isinstance(profile.name, str) or not _NAME.match(profile.name):
        raise ToolFormatError(
            f"tool-call format name {profile.name!r} must be a word (letters, digits, _ . -)"
        )
    if not profile.openers:
        raise ToolFormatError(f"format {profile.name!r} needs at least one Opener")
    for pattern in profile.detect:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ToolFormatError(
                f"format {profile.name!r}: detect pattern {pattern!r} is not a regex ({exc})"
            ) from exc
    from mp13_engine.toolcalls._machine import StreamMachine  # the machine imports this module

    try:
        StreamMachine(profile).feed("")
    except Exception as exc:
        raise ToolFormatError(
            f"format {profile.name!r} cannot drive the stream parser ({type(exc).__name__}: "
            f"{exc}); check its openers' patterns"
        ) from exc


#: The process-wide registry (see the module docstring for why it is one).
REGISTRY = FormatRegistry()


def formats() -> list[str]:
    """The names of all known tool-call formats (built-in and registered), sorted."""
    return REGISTRY.names()


def get_profile(name: str) -> Profile:
    """The ``Profile`` of a format; ``ToolFormatError`` (listing the known names) if unknown."""
    return REGISTRY.get(name)


def register_format(profile: Profile, *, replace: bool = False) -> FormatHandle:
    """Add a tool-call format for this process; returns a handle that can undo it.

    The ``Profile`` says how the format's calls open and close, how a payload is
    decoded and rendered, and (``detect``) which chat templates use it; the
    shared stream machine runs it exactly like a built-in, streaming and whole
    text. Registered formats are found by ``formats``, ``get_profile``,
    ``parse``, ``StreamParser``, ``detect_format`` (before the built-ins) and by
    engines loaded after this call (``EngineConfig(tool_format=name)`` or
    detection). ``replace=True`` lets a format shadow a built-in or an earlier
    registration of the same name. Keep it registered while engines use it;
    ``with register_format(p): ...`` scopes a registration (tests).
    Raises ``ToolFormatError`` for a taken name or a profile that cannot run.
    """
    return REGISTRY.register(profile, replace=replace)


def unregister_format(name: str) -> None:
    """Remove a format added with ``register_format`` (built-ins cannot be removed)."""
    REGISTRY.unregister(name)


def detect_format(chat_template: str | None) -> str | None:
    """The tool-call format a chat template asks for, or ``None`` when no signature matches."""
    require_text(chat_template, "the chat template detect_format reads", optional=True)
    if not chat_template:
        return None
    for name in REGISTRY.detect_order():
        if any(re.search(sig, chat_template) for sig in get_profile(name).detect):
            return name
    return None


def render_calls(calls: Sequence[ToolCall], format: str) -> str:
    """Tool calls written in a format's wire syntax, as its model would emit them."""
    calls = require_list(calls, ToolCall, "render_calls takes a list of ToolCall values")
    return get_profile(format).render(calls)
