# SPDX-License-Identifier: MIT
"""``ChatApp``: one REPL — its config, engine, session, toolbox, commands and the loop.

Life cycle: ``main(argv)`` parses the flags and loads the config file, routes library
warnings to the log file (``_logs``), then either answers one question and exits
(``-p``, piped input: ``_oneshot``) or ``run_async`` starts the engine (a progress
display while it loads: ``_startup``), opens the session, builds the toolbox (builtins
+ registered tools), opens a new conversation and runs the loop until ``/quit`` or
Ctrl+D (exit status 0). A failed start prints one line (the traceback goes to the log)
and exits 1.

The loop reads a line with ``prompt_async`` inside ``patch_stdout()`` (so text printed
while the prompt is shown appears above it) or, when standard input is piped into the
REPL (``-i``), reads the next line as it is and prints it after the prompt, so the
transcript shows what ran (prompt-toolkit reads a pipe as keystrokes: an ESC in the text
starts a key sequence, and lines that arrive together with the end of the input are
lost). It then runs the line as the *foreground task*
(``_foreground``: Ctrl+C cancels just that task): a ``/command`` through the registry,
anything else as a message to the model. Any exception of a task prints as one line;
``/error`` shows its traceback.

The app is the top of the package: it implements ``_repl.Repl``, the protocol its
commands are written against, and wires the registry, the completer and the commands
together; nothing below imports it. It holds no state outside itself: several apps can
live in one process (tests run many).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs
from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output
from prompt_toolkit.patch_stdout import patch_stdout
from rich.console import Console
from rich.text import Text

from mp13_context import ChatContext, Cursor, EngineClient, Session
from mp13_toolbox import ApprovalRequest, Toolbox
from mp13chat import _adapter_folder, _reply, _startup, _warmup
from mp13chat import _position as position
from mp13chat import _render as render
from mp13chat._cli import CliOptions, one_shot_question, parse_cli
from mp13chat._commands import builtin_commands
from mp13chat._completer import CommandCompleter
from mp13chat._config import ChatConfig, default_config_path, load_config
from mp13chat._errors import ChatError, UsageError
from mp13chat._foreground import Foreground
from mp13chat._history import make_history
from mp13chat._keys import make_key_bindings
from mp13chat._logprobs import LogprobsState
from mp13chat._logs import LOG_FILENAME, LibraryLog, first_line, library_log
from mp13chat._model import ModelCatalog, engine_catalog
from mp13chat._oneshot import AnswerView, refuse
from mp13chat._registry import Command, CommandRegistry
from mp13chat._repl import QuitRequested, Repl
from mp13chat._safe_console import SafeConsole
from mp13chat._style import make_prompt_style, make_theme
from mp13chat._terminal import is_terminal, no_echo
from mp13chat._tools import ToolLike, ToolRegistration, as_registration, check_options

if TYPE_CHECKING:  # pragma: no cover
    from mp13_engine import Engine, TrainingJob

#: ``config_source`` of a config the wrapper app handed to ``ChatApp``: /config must not
#: name the config file, which was not read.
GIVEN_CONFIG = "the app's ChatConfig, no file read"


class ChatApp:
    """One REPL. Wrapper apps may create it, add tools and commands, then call ``main``.

    ``engine``, ``session`` and ``toolbox`` may be given (tests pass a ``FakeEngine``);
    otherwise they are created from the config on start. ``input``/``output`` are
    prompt-toolkit's (tests pass a pipe input and ``DummyOutput``), ``console`` rich's:
    the app's own is a ``_safe_console.SafeConsole``, which shows control characters in
    data (replies, tool results, imports) instead of obeying them; a console passed in
    is used as it is. ``model_catalog`` stands in for ``mp13_engine.models`` (named real models).

    What ``main`` starts with: a ``config`` given here is used as it is (the command-line
    flags still apply on top) and no config file is read, unless the user names one with
    ``--config FILE``; without one, ``main`` reads ``config_path`` (given here, else
    ``default_config_path()``), creating it with the defaults on first run. Either way the
    folder of ``config_path`` holds the history, the default session, ``adapters/`` and
    the log, so a wrapper app that wants its own passes ``config_path``.
    """

    def __init__(
        self,
        config: ChatConfig | None = None,
        *,
        config_path: Path | str | None = None,
        engine: EngineClient | None = None,
        session: Session | None = None,
        toolbox: Toolbox | None = None,
        tools: Iterable[ToolLike] = (),
        commands: Iterable[Command[Repl]] | None = None,
        console: Console | None = None,
        input: Input | None = None,  # prompt-toolkit's parameter name
        output: Output | None = None,
        model_catalog: ModelCatalog | None = None,
    ) -> None:
        self.config = config if config is not None else ChatConfig()
        self._given_config = config  # what main() starts from instead of the file
        self.start_config = self.config
        self.config_path = Path(config_path).expanduser() if config_path else None
        self.config_source = GIVEN_CONFIG if config is not None else "defaults"
        # None until start() creates what was not given (the Repl protocol's members
        # are set from then on).
        self.engine: Any = engine
        self.session: Any = session
        self.toolbox: Any = toolbox
        self.context: Any = None
        self.cursor: Any = None
        self.console = console or SafeConsole(theme=make_theme(), highlight=False)
        self.commands: CommandRegistry[Repl] = CommandRegistry(
            builtin_commands() if commands is None else commands
        )
        self.last_traceback: str | None = None
        self.reply_logprobs = LogprobsState()
        self.model_label = ""
        self.training_job: TrainingJob | None = None
        self.training_announcer: asyncio.Task[Any] | None = None
        self._quit_warned: TrainingJob | None = None  # the job a refused /quit named
        self.interactive = True  # False in a one-shot run: no banner, no questions
        self.library_log: LibraryLog | None = None  # set by main(): library warnings
        self.model_catalog = model_catalog
        if not isinstance(tools, Iterable) or callable(tools) or isinstance(tools, str):
            raise ChatError(f"tools is a list of functions, not {tools!r}: tools=[f, ...]")
        self._tools: list[ToolRegistration] = [as_registration(t) for t in tools]
        self._input = input
        self._output = output
        self._owned: list[Callable[[], Awaitable[None] | None]] = []
        self._prompt: PromptSession[str] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._warmup: asyncio.Task[None] | None = None  # see _warmup
        self._warm_key: _warmup.PrefixKey | None = None  # what self._warmup computes
        # Only the real terminal echoes (prompt-toolkit's input in tests does not).
        stdin: IO[Any] | None = sys.stdin if input is None else None
        # Piped into the REPL (-i): lines are read as they are, not as keystrokes.
        self._piped = stdin if stdin is not None and not is_terminal(stdin) else None
        self._foreground = Foreground(
            on_error=self._report, on_cancel=self._report_cancelled, stdin=stdin
        )

    # -- wrapper-app API --------------------------------------------------------------

    def register_tool(self, func: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        """Offer ``func`` as a tool (options of ``Toolbox.register``); before or after start."""
        registration = ToolRegistration(func, options)
        # Before start: now, not when the app starts; after: the same ChatError for an
        # option Toolbox.register does not take.
        check_options(func, options)
        if self.toolbox is not None:
            before = self._prefix_key()
            self.toolbox.register(func, **registration.options)
            self._warm_if_changed(before)  # an advertised tool: its description is new
        else:
            self._tools.append(registration)
        return func

    def register_command(self, cmd: Command[Repl]) -> None:
        """Add a slash command (made with ``mp13chat.command``)."""
        self.commands.add(cmd)

    def take_pending_tools(self) -> list[ToolRegistration]:
        """Tools registered before the toolbox existed (``start`` registers them)."""
        pending, self._tools = self._tools, []
        return pending

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv``, run the REPL (or answer once) to its end, return the exit status:
        0 done, 1 a failed start or a failed one-shot answer, 2 bad flags or config,
        130 interrupted."""
        if argv is not None and (isinstance(argv, str) or not isinstance(argv, Sequence)):
            raise ChatError(
                f"argv is a list of command-line arguments (e.g. ['--model', 'tiny']), not {argv!r}"
            )
        options = parse_cli(argv)
        try:
            self.apply_options(options)
            question = one_shot_question(options, sys.stdin)
        except ChatError as exc:
            print(f"mp13chat: {exc}", file=sys.stderr)
            return 2
        assert self.config_dir is not None  # apply_options set config_path
        try:
            with library_log(self.config_dir / LOG_FILENAME) as log:
                self.library_log = log
                if question is not None:
                    return asyncio.run(self._answer_once(question, options))
                return asyncio.run(self.run_async(replay=options.replay))
        except KeyboardInterrupt:  # Ctrl+C while starting, or during a one-shot answer
            print("mp13chat: interrupted", file=sys.stderr)
            return 130
        finally:
            self.library_log = None

    def apply_options(self, options: CliOptions) -> None:
        """Settle the config and its folder, then apply the flags: ``--config FILE`` is
        read; else a config given to the constructor is used as it is; else the file at
        ``config_path`` (given to the constructor, or the default) is read."""
        if options.config:
            path: Path = Path(options.config)
        else:
            path = self.config_path or default_config_path()
        self.config_path = path
        if self._given_config is not None and not options.config:
            base = self._given_config
            self.config_source = GIVEN_CONFIG
        else:
            base = load_config(path)
            self.config_source = str(path)
        self.config = self.start_config = options.apply(base)
        if self.config != base:
            self.config_source += " + command-line flags"

    async def _answer_once(self, question: str, options: CliOptions) -> int:
        """The one-shot run (``_oneshot``): start quietly, answer, say how it went."""
        self.interactive = False
        self.console = SafeConsole(theme=make_theme(), highlight=False, stderr=True)
        if options.session is None:  # a one-shot answer records nothing unless asked to
            self.config = attrs.evolve(self.config, session=":memory:")
        try:
            if not await self._started():
                return 1
            view = AnswerView(self.console, sys.stdout, stream=self.config.stream)
            try:
                position.title_if_untitled(self, question)
                turn = await self.cursor.aask(question, on_event=view)
            except Exception as exc:
                render.print_start_error(self.console, exc)
                return 1
            finally:
                view.end_line()
            if turn.error:
                render.print_start_error(self.console, turn.error)
                return 1
            if turn.truncated:
                render.print_warning(
                    self.console,
                    "the answer was cut at max_new_tokens; --max-new-tokens N allows a longer one",
                )
            return 0
        finally:
            await self.aclose()

    # -- life cycle -------------------------------------------------------------------

    @property
    def config_dir(self) -> Path | None:
        return self.config_path.parent if self.config_path else None

    @property
    def adapters_dir(self) -> Path | None:
        """Where ``/train`` saves and which adapters load at start (``_adapter_folder``)."""
        return _adapter_folder.adapters_dir(self.config.engine, self.config_dir)

    async def run_async(self, *, replay: str | None = None) -> int:
        """Start, optionally replay a conversation, run the loop; always clean up."""
        try:
            if not await self._started():
                return 1
            self.notice_library_warnings()
            if replay:
                await self._foreground.run(self.execute(f"/replay {replay}"))
            await self.loop()
            return 0
        finally:
            await self.aclose()

    async def _started(self) -> bool:
        """``start``; a failure is reported in one line (no REPL command is named: the
        REPL is gone) with the traceback in the log, and gives False."""
        try:
            await self.start()
        except Exception as exc:
            self._remember(exc)
            where = None
            if self.library_log is not None:
                self.library_log.write_text(self.last_traceback or "")
                where = self.library_log.path
            hint = _startup.start_hint(self.config, self._catalog(), exc)
            render.print_start_error(self.console, exc, hint=hint, log=where)
            return False
        return True

    def _catalog(self) -> ModelCatalog:
        return self.model_catalog if self.model_catalog is not None else engine_catalog()

    async def start(self) -> None:
        """Create what was not given: engine, session, toolbox, context, first cursor."""
        console, quiet = self.console, not self.interactive
        if not quiet:
            _startup.print_banner(console)
        demo = False
        if self.engine is None:
            # Echo off while the progress bars run, as while a reply streams: a Ctrl+C
            # echoed as ^C after a full-width bar wrapped it onto a second line, and the
            # bar's erase left the first on screen above "mp13chat: interrupted".
            with no_echo(self._foreground.stdin):
                choice = await _startup.choose_model(console, self.config.model, self._catalog())
                fields = _startup.engine_fields(self.config, self.adapters_dir)
                engine = await _startup.load_engine(
                    console, choice, fields, self.library_log, threads=self.config.threads
                )
            self.engine = engine
            self.own(engine.aclose)
            self.model_label, demo = choice.label, choice.demo
            if not quiet:
                render.print_info(
                    console, f"model: {choice.label} · {_startup.engine_summary(engine)}"
                )
                if choice.note:
                    render.print_warning(console, choice.note)
        elif not self.model_label:
            self.model_label = type(self.engine).__name__
        # The demo exists to show the whole loop, approval included.
        ask_for_all = demo and not quiet and not self.config.tool_approvals
        self.toolbox = _startup.make_toolbox(
            self.config, self.take_pending_tools(), ask_for_all=ask_for_all, toolbox=self.toolbox
        )
        if ask_for_all:
            render.print_info(
                console,
                "the demo asks before running a tool; /tools approval NAME allow stops that",
            )
        await _startup.load_saved_adapters(console, self.engine, self.adapters_dir, quiet=quiet)
        if self.session is None:
            path = _startup.session_path(self.config, self.config_dir)
            self.session = await asyncio.to_thread(Session.open, path)
            self.own(self.session.close)
            if path != ":memory:" and not quiet:
                render.print_info(console, f"session: {Path(path)}")
        self.context = self._make_context()
        self.new_conversation()
        self._start_warmup()

    def _warms(self) -> bool:
        """Whether warm-ups run: interactive runs only (a one-shot question is sent at
        once), and not when the config or the engine's prefix cache is off."""
        return (
            self.interactive
            and self.config.warm_prefix_cache
            and _warmup.has_prefix_cache(self.engine)
        )

    def _start_warmup(self, key: _warmup.PrefixKey | None = None) -> None:
        """Compute what comes before the next question (``key``, else computed here; at
        start: the first conversation's fixed start) into the prefix cache in the
        background (``_warmup``); a warm-up still running is cancelled first. Outside
        the app's event loop (e.g. ``register_tool`` called between runs) it does
        nothing: the next command or start warms."""
        if not self._warms():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._warm_key = key if key is not None else self._prefix_key()
        self._warmup = self.background(
            _warmup.warm_prefix(
                self.engine, self.cursor, lambda: self.library_log, after=self._warmup
            )
        )

    def _prefix_key(self) -> _warmup.PrefixKey | None:
        return _warmup.prefix_key(self.engine, self.cursor) if self._warms() else None

    def _warm_if_changed(self, before: _warmup.PrefixKey | None) -> None:
        """Warm again when a command changed what comes before the next question (a new
        conversation, another session, system prompt, tools or adapters): its first
        reply would compute all of it again."""
        after = self._prefix_key()
        if after is not None and after not in (before, self._warm_key):
            self._start_warmup(after)

    async def _after_warmup(self) -> None:
        """Let a running warm-up finish first: the next request's prompt starts with the
        tokens it computes (so waiting costs nothing), and sent beside it the request
        would compute them too. Ctrl+C cancels the wait, never the warm-up."""
        warmup = self._warmup
        if warmup is not None and not warmup.done():
            await asyncio.wait([warmup])

    def notice_library_warnings(self) -> None:
        """Say once, quietly, that library warnings went to the log (and how to see them)."""
        log = self.library_log
        if log is None or log.noticed or not self.interactive:
            return
        # The app's own notes (LibraryLog.note: INFO) are kept quiet.
        warnings = [r for r in log.records if r.levelno >= logging.WARNING]
        if not warnings:
            return
        log.noticed = True
        render.print_info(
            self.console,
            f"library warnings go to /warnings (and {log.path}) instead of the screen; the first: "
            f"{first_line(warnings[0])}",
        )

    def own(self, closer: Callable[[], Awaitable[None] | None]) -> None:
        """Run ``closer`` on ``aclose`` (things the app created, closed in reverse order)."""
        self._owned.append(closer)

    def background(self, work: Awaitable[Any]) -> asyncio.Task[Any]:
        """Run ``work`` beside the loop (e.g. announcing a finished training job); its
        output appears above the prompt. Cancelled on ``aclose``."""
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def aclose(self) -> None:
        """Stop background work and close what the app opened (engine, session), newest
        first; a failing close is reported and the others still run."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        while self._owned:
            closer = self._owned.pop()
            try:
                result = closer()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as exc:  # closing must go on with the rest
                render.print_error(self.console, exc)

    # -- what commands use (the Repl protocol) ----------------------------------------

    def _make_context(self) -> ChatContext:
        """The app's ``ChatContext``; its approver asks inline, or refuses in a one-shot run."""

        async def approval(request: ApprovalRequest) -> Any:
            if not self.interactive:
                return refuse(self.console, request)
            return await _reply.approve(self, request)

        return ChatContext(
            self.session, engine=self.engine, toolbox=self.toolbox, approval=approval
        )

    def new_conversation(self) -> Cursor:
        """Move to a new conversation with the config's system message and parameters."""
        cur: Cursor = self.context.cursor()
        if self.config.system is not None:
            cur.system.set(self.config.system)
        if self.config.params:
            cur.params.set(**self.config.params)
        self.cursor = cur
        return cur

    def open_session(self, path: str) -> None:
        """Make the session file at ``path`` current, at its latest conversation (a new
        one when it has none); a session the app opened itself is closed."""
        old = self.session
        self.session = Session.open(path)
        self.own(self.session.close)
        self.context = self._make_context()
        conversations = self.session.conversations()
        if conversations:
            latest = max(conversations, key=lambda c: c.created_at)
            self.cursor = self.context.cursor(latest.id)
        else:
            self.new_conversation()
        if old.close in self._owned:
            self._owned.remove(old.close)
            old.close()

    def real_engine(self, feature: str) -> Engine:
        """The loaded ``mp13_engine.Engine``, or a ``ChatError`` naming ``feature``."""
        from mp13_engine import Engine

        if not isinstance(self.engine, Engine):
            raise ChatError(
                f"this engine ({type(self.engine).__name__}) does not support {feature}; "
                "start mp13chat on a real model for it"
            )
        return self.engine

    async def ask_user(self, question: str) -> str:
        """Ask one inline question (e.g. tool approval); Ctrl+C/Ctrl+D answer ``""``."""
        try:
            if self._piped is not None:
                return await self._read_piped(question)
            session: PromptSession[str] = PromptSession(input=self._input, output=self._output)
            return await session.prompt_async(question)
        except (KeyboardInterrupt, EOFError):
            return ""

    async def _read_piped(self, question: str) -> str:
        """The next line of piped input, printed after ``question``; ``EOFError`` at its end."""
        assert self._piped is not None
        line: str = await asyncio.to_thread(self._piped.readline)
        if not line:
            raise EOFError
        text = line.rstrip("\r\n")
        self.console.print(Text(question + text))
        return text

    def cancel_reported(self) -> None:
        """The foreground task has told the user it was cancelled (e.g. a reply's footer);
        no second "cancelled" line follows."""
        self._foreground.reported()

    # -- the loop ---------------------------------------------------------------------

    def _prompt_session(self) -> PromptSession[str]:
        if self._prompt is None:
            folder = self.config_dir if self.config.history else None
            self._prompt = PromptSession(
                history=make_history(folder),
                completer=CommandCompleter(self),
                complete_while_typing=False,
                key_bindings=make_key_bindings(),
                style=make_prompt_style(),
                input=self._input,
                output=self._output,
                enable_history_search=True,
            )
        return self._prompt

    def prompt_text(self) -> StyleAndTextTuples:
        """The prompt: conversation title (or id), try-out marker, the cursor's node."""
        try:
            label = position.prompt_label(self)
        except Exception:  # a prompt must always render, whatever state the session is in
            label = ""
        return [("class:prompt.branch", f"{label} " if label else ""), ("class:prompt", "> ")]

    async def loop(self) -> None:
        """Read and run lines until ``/quit`` or Ctrl+D (the end of piped input)."""
        session = self._prompt_session() if self._piped is None else None
        # No prompt stays on screen while a piped line runs: nothing to print above.
        with patch_stdout(raw=True) if session is not None else contextlib.nullcontext():
            while True:
                try:
                    if session is None:
                        text = await self._read_piped("".join(t[1] for t in self.prompt_text()))
                    else:
                        text = await session.prompt_async(self.prompt_text)
                except KeyboardInterrupt:
                    continue
                except EOFError:
                    if self._refuse_quit():
                        continue
                    break
                if not text.strip():
                    continue
                try:
                    await self._foreground.run(self.execute(text))
                except QuitRequested:
                    if self._refuse_quit():
                        continue
                    break
                finally:
                    self.notice_library_warnings()

    def _refuse_quit(self) -> bool:
        """Whether to stay, once, because quitting would cancel a running training job.

        Quitting closes the engine, which cancels the job and saves nothing: minutes of
        training went without a word. As a shell does with running jobs, the first
        /quit or Ctrl+D says so and stays; the next one leaves.
        """
        job = self.training_job
        if job is None or job.done() or self._quit_warned is job:
            return False
        self._quit_warned = job
        render.print_warning(
            self.console,
            f"training job {job.adapter} is still running, and quitting cancels it and "
            "saves nothing; /train watch waits for it, /train cancel stops it, /quit "
            "again (or Ctrl+D) leaves anyway",
        )
        return True

    async def execute(self, text: str) -> None:
        """Run one input line: a command when it starts with ``/``, else a message."""
        stripped = text.strip()
        if stripped.startswith("/") and not stripped.startswith("//"):
            invocation = self.commands.parse(stripped)
            before = self._prefix_key()
            try:
                await invocation.command.run(self, invocation.line)
            except UsageError as exc:
                raise UsageError(f"{exc}; usage: {invocation.command.usage}") from exc
            finally:  # a command that failed or was cancelled halfway may have changed it
                self._warm_if_changed(before)
            return
        await self._after_warmup()
        # "//text" sends a message that starts with "/".
        await _reply.ask(self, stripped[1:] if stripped.startswith("//") else text)

    def _remember(self, exc: BaseException) -> None:
        self.last_traceback = "".join(traceback.format_exception(exc))

    def _report(self, exc: Exception) -> None:
        self._remember(exc)
        render.print_error(self.console, exc)

    def _report_cancelled(self) -> None:
        render.print_warning(self.console, "cancelled")
