# SPDX-License-Identifier: MIT
"""Which model the REPL starts on: a named real model fetched on first use (with a
progress bar and one clear line), the banner and /engine, and a failed start."""

from __future__ import annotations

import asyncio
import io
import pathlib
import types

import pytest
from rich.console import Console

from mp13chat import ChatApp, ChatConfig
from mp13chat._fetch import FetchDisplay
from mp13chat._model import resolve_model
from mp13chat._style import make_theme

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> pathlib.Path:
    from mp13_engine.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", family="chatml", seed=0)


class FakeCatalog:
    """Stands in for ``mp13_engine.models``: one name; ``fetch`` records its calls, emits
    the progress events the real one does and returns an HF-format folder."""

    def __init__(self, path: pathlib.Path, *, cached: bool = False) -> None:
        self.path = path
        self.cached = cached
        self.calls: list[tuple[str, dict]] = []

    def names(self) -> list[str]:
        return ["smollm2-135m"]

    def fetch(self, name, *, cache_dir=None, progress=None):
        self.calls.append((name, {"cache_dir": cache_dir, "progress": progress}))
        event = types.SimpleNamespace
        if not self.cached:
            for done in (0, 40, 92):
                progress(event(stage="download", done=done, total=92, message="wheel"))
            progress(event(stage="convert", done=1, total=1, message="to HF format"))
        progress(event(stage="ready", done=1, total=1, message=""))
        return self.path


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, theme=make_theme(), width=120, color_system=None), out


def _start(tmp_path, catalog, model="smollm2-135m") -> tuple[ChatApp, str]:
    console, out = _console()
    app = ChatApp(
        ChatConfig(model=model, session=":memory:", engine={"device": "cpu"}),
        config_path=tmp_path / "config.json",
        console=console,
        model_catalog=catalog,
    )

    async def run() -> None:
        try:
            await app.start()
        finally:
            await app.aclose()

    asyncio.run(run())
    return app, out.getvalue()


def test_a_named_model_is_fetched_on_first_use_with_a_clear_message(tmp_path, tiny_path):
    catalog = FakeCatalog(tiny_path)
    app, out = _start(tmp_path, catalog)
    assert [name for name, _ in catalog.calls] == ["smollm2-135m"]
    assert callable(catalog.calls[0][1]["progress"])
    assert "smollm2-135m is not in the model cache yet: fetching it once" in out
    assert f"smollm2-135m fetched into {tiny_path}" in out
    assert "model: smollm2-135m · cpu · float32" in out
    assert app.engine.config.model == str(tiny_path)


def test_a_cached_named_model_starts_without_the_fetch_message(tmp_path, tiny_path):
    _, out = _start(tmp_path, FakeCatalog(tiny_path, cached=True))
    assert "fetching" not in out and "fetched" not in out
    assert "model: smollm2-135m" in out


def test_a_local_folder_wins_over_a_name_and_other_names_pass_through(tmp_path, tiny_path):
    catalog = FakeCatalog(tiny_path)
    (tmp_path / "smollm2-135m").mkdir()
    choice = resolve_model(str(tmp_path / "smollm2-135m"), catalog=catalog)
    assert choice.path == str(tmp_path / "smollm2-135m") and not catalog.calls
    assert resolve_model("org/other-model", catalog=catalog).path == "org/other-model"
    assert not catalog.calls


def test_fetch_display_follows_the_stages_on_a_terminal():
    out = io.StringIO()
    console = Console(file=out, theme=make_theme(), width=100, force_terminal=True)
    event = types.SimpleNamespace
    with FetchDisplay(console, "smollm2-135m") as display:
        display(event(stage="download", done=10, total=100, message="wheel"))
        display(event(stage="convert", done=0, total=None, message="dequantizing"))
        display(event(stage="ready", done=1, total=1, message=""))
    assert display.fetched
    shown = out.getvalue()
    assert "fetching it once" in shown
    assert "smollm2-135m: ready" in shown and "100%" in shown  # the bar follows the stages


def test_banner_names_the_model_once_and_engine_shows_the_resolved_device(
    tmp_path, tiny_path, monkeypatch
):
    """The banner had the path twice (label and path) and /engine said 'auto'."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "cache"))
    console, out = _console()
    with create_pipe_input() as inp:
        app = ChatApp(
            ChatConfig(model=str(tiny_path), session=":memory:"),
            config_path=tmp_path / "config.json",
            console=console,
            input=inp,
            output=DummyOutput(),
        )
        inp.send_text("/engine\r/quit\r")
        assert asyncio.run(asyncio.wait_for(app.run_async(), 60)) == 0
    text = out.getvalue()
    banner, _, table = text.partition(" loaded ")  # the /engine table's first row
    assert banner.count(str(tiny_path)) == 1, text  # the label is the path here; said once
    assert "· cpu · float32" in banner
    rows = {line.split("│")[0].strip(): line.split("│")[-1].strip() for line in table.splitlines()}
    assert rows["device"] == "cpu" and rows["dtype"] == "float32", table
    assert "auto" not in table


def test_an_uncached_hub_id_suggests_download_and_the_known_names(tmp_path, tiny_path):
    console, out = _console()
    app = ChatApp(
        ChatConfig(model="someone/not-cached-model", session=":memory:"),
        config_path=tmp_path / "config.json",
        console=console,
        model_catalog=FakeCatalog(tiny_path),
    )
    assert asyncio.run(app.run_async()) == 1
    text = out.getvalue()
    assert "--download fetches someone/not-cached-model" in text
    assert "demo, tiny, smollm2-135m" in text
    assert "/error" not in text


def test_on_a_terminal_a_slow_start_step_shows_a_spinner_that_goes_away():
    from mp13chat._startup import with_progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    assert asyncio.run(with_progress(console, "loading the model", lambda: 42)) == 42
    assert "loading the model" in out.getvalue()  # shown while it ran
    assert out.getvalue().endswith("\x1b[2K")  # then its line erased (transient)
    plain = Console(file=io.StringIO())
    assert asyncio.run(with_progress(plain, "loading the model", lambda: 7)) == 7
    assert plain.file.getvalue() == ""  # elsewhere nothing: no blank lines in a log
