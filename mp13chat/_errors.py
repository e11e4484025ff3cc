# SPDX-License-Identifier: MIT
"""The REPL's branch of mp13's exception tree (root: ``Mp13Error``).

::

    Mp13Error
    └── ChatError                  something the REPL itself rejects
        ├── UsageError             a command's arguments are wrong (message shows the usage)
        ├── UnknownCommandError    no command (or several, for a prefix) matches a word
        └── ChatConfigError        the user config file cannot be read or has a bad field
            └── ChatConfigKeywordError a misspelt ChatConfig keyword (also
                                       mp13_toolbox.UnknownKeywordError, a TypeError)

Errors of the lower layers (engine, context, toolbox) reach the REPL loop unchanged;
the loop prints any exception as one line and keeps the traceback for ``/error``.
"""

from __future__ import annotations

from mp13_toolbox import Mp13Error, UnknownKeywordError


class ChatError(Mp13Error):
    """Base of the REPL's own errors."""


class UsageError(ChatError, ValueError):
    """A command was given arguments it does not accept; the message shows its usage."""


class UnknownCommandError(ChatError, LookupError):
    """No command matches the word typed, or a prefix matches several commands."""


class ChatConfigError(ChatError, ValueError):
    """The user config file is not valid JSON or has an unknown or ill-typed field."""


class ChatConfigKeywordError(ChatConfigError, UnknownKeywordError):
    """A keyword ``ChatConfig`` has no field for; the message names the closest one.

    Also a ``TypeError``, which is what such a call raised before.
    """
