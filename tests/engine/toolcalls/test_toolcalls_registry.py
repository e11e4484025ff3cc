# SPDX-License-Identifier: Apache-2.0
"""Formats users add: registering, scoping, shadowing, detection order and refusals.

The conformance and streaming suites already run a registered format (the example's
``command_r``, see conftest) through every rule; these tests pin the registry itself.
"""

from __future__ import annotations

import threading

import attrs
import pytest

from mp13_engine import ToolFormatError, toolcalls
from mp13_engine.toolcalls import Opener, Profile
from mp13_toolbox import ToolCall
from tests.engine.toolcalls._toolcalls_cases import USER_FORMAT


def _profile(name: str, opener: str = "<<call>>", detect: tuple[str, ...] = ()) -> Profile:
    def decode(payload, ctx):
        return toolcalls.calls_from_json(payload)

    def render(calls):
        return "".join(f'{opener}{{"name": "{c.name}", "arguments": {{}}}}<<end>>' for c in calls)

    return Profile(
        name=name,
        openers=(Opener(opener, ends=("<<end>>",), quoted='"'),),
        decode=decode,
        render=render,
        detect=detect,
    )


def test_a_registered_format_parses_streams_and_is_listed_until_unregistered():
    handle = toolcalls.register_format(_profile("acme"))
    try:
        assert "acme" in toolcalls.formats() and handle.name == "acme"
        assert repr(handle) == "FormatHandle('acme')"
        text = 'Hi <<call>>{"name": "f", "arguments": {"x": "<<end>>"}}<<end>>'
        assert toolcalls.parse(text, "acme").tool_calls == (ToolCall("f", {"x": "<<end>>"}),)
        stream = toolcalls.StreamParser("acme")
        for ch in text:
            stream.feed(ch)
        assert stream.finish() == toolcalls.parse(text, "acme")
    finally:
        handle.unregister()
    assert "acme" not in toolcalls.formats()
    with pytest.raises(ToolFormatError, match="register_format"):
        toolcalls.parse("x", "acme")
    handle.unregister()  # a second undo is a no-op


def test_a_registration_is_scoped_by_with_even_on_errors():
    with pytest.raises(RuntimeError), toolcalls.register_format(_profile("acme")):
        assert "acme" in toolcalls.formats()
        raise RuntimeError("boom")
    assert "acme" not in toolcalls.formats()


def test_registered_formats_are_detected_first_most_recent_first():
    template = "{{ '<<call>> and <tool_call>' }}"
    assert toolcalls.detect_format(template) == "hermes"
    with toolcalls.register_format(_profile("acme", detect=(r"<<call>>",))):
        assert toolcalls.detect_format(template) == "acme"
        with toolcalls.register_format(_profile("acme2", detect=(r"<<call>>",))):
            assert toolcalls.detect_format(template) == "acme2"
        assert toolcalls.detect_format(template) == "acme"
    assert toolcalls.detect_format(template) == "hermes"


def test_a_taken_name_is_refused_unless_replacing_and_builtins_come_back():
    with pytest.raises(ToolFormatError, match="already built-in"):
        toolcalls.register_format(_profile("hermes"))
    with pytest.raises(ToolFormatError, match="already registered"):
        toolcalls.register_format(_profile(USER_FORMAT.name))
    mine = _profile("hermes", opener="<<hermes>>")
    with toolcalls.register_format(mine, replace=True):
        assert toolcalls.get_profile("hermes") is mine
        out = toolcalls.parse('<<hermes>>{"name": "f", "arguments": {}}<<end>>', "hermes")
        assert out.tool_calls == (ToolCall("f", {}),)
    assert toolcalls.get_profile("hermes") is not mine
    assert toolcalls.parse('<tool_call>{"name": "f"}</tool_call>', "hermes").tool_calls


def test_an_old_handle_does_not_remove_a_newer_registration():
    old = toolcalls.register_format(_profile("acme"))
    new = toolcalls.register_format(_profile("acme", opener="<<new>>"), replace=True)
    old.unregister()
    assert toolcalls.get_profile("acme") is new.profile
    new.unregister()
    assert "acme" not in toolcalls.formats()


def test_unregister_format_by_name_refuses_builtins_and_unknown_names():
    toolcalls.register_format(_profile("acme"))
    toolcalls.unregister_format("acme")
    assert "acme" not in toolcalls.formats()
    with pytest.raises(ToolFormatError, match="built-in"):
        toolcalls.unregister_format("hermes")
    with pytest.raises(ToolFormatError, match="not registered"):
        toolcalls.unregister_format("nope")


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"name": "sp ace"}, "must be a word"),
        ({"openers": ()}, "at least one Opener"),
        ({"detect": ("(",)}, "not a regex"),
        ({"openers": (Opener("[", regex=True),)}, "cannot drive the stream parser"),
    ],
)
def test_a_profile_that_cannot_run_is_refused_when_registered(bad, match):
    good = _profile("acme")
    fields = {
        "name": good.name,
        "openers": good.openers,
        "decode": good.decode,
        "render": good.render,
        "detect": good.detect,
    }
    with pytest.raises(ToolFormatError, match=match):
        toolcalls.register_format(Profile(**{**fields, **bad}))
    with pytest.raises(ToolFormatError, match=r"needs a toolcalls\.Profile"):
        toolcalls.register_format({"name": "acme"})  # type: ignore[arg-type]
    assert "acme" not in toolcalls.formats()


def test_registering_from_many_threads_loses_nothing():
    handles: list[toolcalls.FormatHandle] = []
    lock = threading.Lock()

    def add(i: int) -> None:
        handle = toolcalls.register_format(_profile(f"fmt{i}"))
        with lock:
            handles.append(handle)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {f"fmt{i}" for i in range(16)} <= set(toolcalls.formats())
    for handle in handles:
        handle.unregister()
    assert not any(name.startswith("fmt") for name in toolcalls.formats())


def test_a_decoder_bug_in_a_registered_format_is_an_error_line_not_an_exception():
    def broken(payload, ctx):
        raise KeyError("oops")

    profile = _profile("acme")
    crashing = Profile(name="acme", openers=profile.openers, decode=broken, render=profile.render)
    with toolcalls.register_format(crashing):
        out = toolcalls.parse('Hi <<call>>{"name": "f"}<<end>> there', "acme")
    assert out.tool_calls == () and "KeyError" in out.errors[0]
    assert out.content == 'Hi <<call>>{"name": "f"}<<end>> there'


def test_a_user_decoder_that_finds_nothing_or_switches_badly_costs_only_its_call():
    def decode(payload, ctx):
        word = payload.strip()
        if word == "nothing":
            return []
        if word == "switch":
            return toolcalls.Switch("span", closes=("<<end>>",))  # a span with no decoder
        if word == "ctrl-c":
            raise KeyboardInterrupt
        return toolcalls.calls_from_json(payload)

    profile = Profile(
        name="picky",
        openers=(Opener("<<call>>", ends=("<<end>>",)),),
        decode=decode,
        render=lambda calls: "",
    )
    with toolcalls.register_format(profile):
        for word, problem in [
            ("nothing", "no tool call in the markup"),
            ("switch", "the format switched to a tool span without a decoder"),
        ]:
            out = toolcalls.parse(f"Hi <<call>>{word}<<end>> then {{}}<<end>>", "picky")
            assert out.tool_calls == () and len(out.errors) == 1
            assert problem in out.errors[0] and out.content.startswith("Hi <<call>>")
        # The user's Ctrl+C while a parse runs is theirs: it is never recorded as a parse error.
        with pytest.raises(KeyboardInterrupt):
            toolcalls.parse("Hi <<call>>ctrl-c<<end>>", "picky")


def test_a_format_without_stop_markers_reads_reasoning_calls_and_quoted_markers():
    """A user format may list no stop markers and no wrappers at all, open its reasoning in
    the prompt (only ``</think>`` shows in the output), and mix JSON strings with verbatim
    regions: a region opener inside a string is text, and a region closer outside any
    region is plain payload text, whole-text and streamed alike."""

    def decode(payload, ctx):
        return toolcalls.calls_from_json(payload.replace("<</v>>", ""))

    profile = Profile(
        name="bare",
        openers=(
            Opener("<<call>>", ends=("<<end>>",), quoted='"', verbatim=(("<<v>>", "<</v>>"),)),
        ),
        decode=decode,
        render=lambda calls: "",
        reasoning=(("<think>", "</think>"),),
        close_only_reasoning=True,
        stops=(),
    )
    text = (
        "I should call f.</think>Sure. "
        '<<call>>{"name": "f", "arguments": {"x": "<<v>> then <<end>>"}}<</v>><<end>> Done.'
    )
    with toolcalls.register_format(profile):
        out = toolcalls.parse(text, "bare")
        stream = toolcalls.StreamParser("bare")
        for ch in text:
            stream.feed(ch)
        streamed = stream.finish()
    assert out.tool_calls == (ToolCall("f", {"x": "<<v>> then <<end>>"}),)
    assert (out.reasoning, out.content, out.errors) == ("I should call f.", "Sure.  Done.", ())
    assert streamed == out
    # Without reasoning tags it lists no marker to drop at all; the call reads the same.
    plain = attrs.evolve(profile, name="plain", reasoning=(), close_only_reasoning=False)
    with toolcalls.register_format(plain):
        again = toolcalls.parse(text.partition("</think>")[2], "plain")
    assert again == attrs.evolve(out, reasoning="")
