# SPDX-License-Identifier: Apache-2.0
"""Streaming equals whole-text parsing for any split, and nothing model-written can raise.

Property tests (hypothesis): for every format and every sample, random split
points give a stream whose final result equals ``parse`` of the whole text,
whose emitted calls equal the final calls, and whose content / reasoning
deltas concatenate to the final content / reasoning. A fuzz test does the same
on random mixtures of every format's markup and on random cuts of real outputs.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mp13_engine import toolcalls
from tests.engine.toolcalls._toolcalls_cases import FORMATS, REAL, TOOLS, profile_of, samples

_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _stream(text: str, fmt: str, cuts: list[int], **kw):
    parser = toolcalls.StreamParser(fmt, **kw)
    events = []
    last = 0
    for cut in sorted(set(cuts)):
        events += parser.feed(text[last:cut])
        last = cut
    events += parser.feed(text[last:])
    events += parser.close()
    return parser.finish(), events


def _check(text: str, fmt: str, cuts: list[int], **kw) -> None:
    whole = toolcalls.parse(text, fmt, **kw)
    out, events = _stream(text, fmt, cuts, **kw)
    assert out == whole
    emitted = [e.call for e in events if isinstance(e, toolcalls.ToolCallCompleted)]
    assert emitted == list(out.tool_calls)
    content = "".join(e.text for e in events if isinstance(e, toolcalls.ContentDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, toolcalls.ReasoningDelta))
    assert content == out.content
    assert reasoning == out.reasoning


@pytest.mark.parametrize("fmt", FORMATS)
@_SETTINGS
@given(data=st.data())
def test_stream_equals_whole_for_random_splits(fmt, data):
    text = data.draw(st.sampled_from(samples(fmt)))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    in_reasoning = data.draw(st.sampled_from([None, False, True]))
    _check(text, fmt, cuts, in_reasoning=in_reasoning)


@pytest.mark.parametrize("fmt", FORMATS)
def test_char_by_char_stream_emits_calls_before_the_end(fmt):
    text = REAL[fmt][0][0] + "\nTrailing words that come after the call."
    parser = toolcalls.StreamParser(fmt, in_reasoning=False)
    seen_call_at = None
    for i, ch in enumerate(text):
        if any(isinstance(e, toolcalls.ToolCallCompleted) for e in parser.feed(ch)):
            seen_call_at = i if seen_call_at is None else seen_call_at
    parser.close()
    if REAL[fmt][0][1]:
        assert seen_call_at is not None and seen_call_at < len(text) - 10
    assert parser.finish() == toolcalls.parse(text, fmt, in_reasoning=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_marker_is_a_prefix_of_another_in_the_same_mode(fmt):
    # A complete short marker must never be a prefix of a longer one scanned at the same
    # time: the short one would win on a cut text and lose on the whole text.
    p = toolcalls.get_profile(fmt)
    closes = [c for _, c in p.reasoning]
    text_mode = [o for o, _ in p.reasoning] + [o.pattern for o in p.openers if not o.regex]
    text_mode += list(p.stops) + list(p.wrappers) + closes
    span_modes = [[*o.ends, *p.stops, *(t for v in o.verbatim for t in v)] for o in p.openers]
    span_modes.append([*closes, *p.stops])
    for markers in [text_mode, *span_modes]:
        for a in set(markers):
            for b in set(markers):
                assert a == b or not b.startswith(a), (fmt, a, b)


def test_content_streams_before_the_end():
    parser = toolcalls.StreamParser("hermes", in_reasoning=False)
    events = parser.feed("Hello there, this is plain text <tool")
    assert events == [toolcalls.ContentDelta("Hello there, this is plain text")]
    assert parser.feed("_cal") == []


def _all_markup() -> list[str]:
    out: set[str] = set()
    for fmt in FORMATS:
        p = profile_of(fmt)
        out.update(o.pattern for o in p.openers if not o.regex)
        out.update(t for o in p.openers for t in o.ends)
        out.update(o.after for o in p.openers if o.after)
        out.update(p.stops + p.wrappers)
        out.update(t for pair in p.reasoning for t in pair)
        out.update(t for o in p.openers for pair in o.verbatim for t in pair)
    out.update(
        [
            '{"name": "f", "arguments": {',
            '{"name": "g", "parameters": ',
            '"x": [1, {"y": "\\u00e9\\"',
            "}",
            "]",
            "[",
            '"',
            "'",
            "\\",
            "(",
            ")",
            "[f(a=1",
            "print(",
            "<function=h>",
            "<parameter=p>",
            "</parameter>",
            "<arg_key>k</arg_key><arg_value>",
            "</arg_value>",
            '<invoke name="i">',
            '<parameter name="q">',
            "</invoke>",
            "functions.f:0",
            " to=functions.f ",
            "analysis",
            "final",
            ";",
            "\n",
            " ",
        ]
    )
    return sorted(out)


_MARKUP = _all_markup()
# Marker prefixes too: a marker cut short, then something else, is where splits go wrong.
_PIECES = st.one_of(
    st.sampled_from(_MARKUP),
    st.sampled_from(sorted({m[:k] for m in _MARKUP for k in range(1, len(m))})),
    st.text(max_size=6),
)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_random_markup_never_raises_and_stays_split_invariant(fmt, data):
    text = "".join(data.draw(st.lists(_PIECES, max_size=25)))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
    tools = data.draw(st.sampled_from([None, TOOLS]))
    _check(text, fmt, cuts, tools=tools)


@pytest.mark.parametrize("fmt", FORMATS)
@_SETTINGS
@given(data=st.data())
def test_fuzz_random_cuts_of_real_outputs(fmt, data):
    source = data.draw(st.sampled_from([t for f in FORMATS for t, _, _ in REAL[f]]))
    a = data.draw(st.integers(0, len(source)))
    b = data.draw(st.integers(a, len(source)))
    text = source[a:b] + data.draw(st.sampled_from(["", source[:a]]))
    _check(text, fmt, data.draw(st.lists(st.integers(0, len(text)), max_size=6)))


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(fmt=st.sampled_from(FORMATS), data=st.data())
def test_fuzz_long_run_all_formats(fmt, data):
    text = "".join(data.draw(st.lists(_PIECES, max_size=30)))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=10))
    _check(
        text,
        fmt,
        cuts,
        tools=data.draw(st.sampled_from([None, TOOLS])),
        in_reasoning=data.draw(st.sampled_from([None, True, False])),
    )
