# SPDX-License-Identifier: MIT
"""The examples run as a newcomer runs them (a fresh process, a scratch folder) and
print what their docstrings promise."""

from __future__ import annotations

import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _run(
    name: str, tmp_path: pathlib.Path, stdin: str = "", timeout: float = 300, args: tuple = ()
) -> str:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=tmp_path,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_quickstart(tmp_path):
    out = _run("quickstart.py", tmp_path)
    assert "wave sizes     : [8]" in out
    assert "finish reason  : cancelled" in out
    assert "finish reason  : length (max_new_tokens=24 reached)" in out
    assert "engine.metrics()" in out


@pytest.mark.real
def test_quickstart_on_a_real_model_says_why_its_reply_ended(tmp_path):
    # --model: a real model ends its reply itself, which the example must not call a cut.
    from mp13_engine import models

    out = _run("quickstart.py", tmp_path, args=("--model", str(models.fetch("smollm2-135m"))))
    assert "finish reason  : stop (the model ended its reply)" in out


def test_tools_basics(tmp_path):
    out = _run("tools_basics.py", tmp_path)
    assert "Unknown tool 'web_search'" in out  # an error result the model can act on
    assert "budgeted round: ['0', '1', '4', 'refused']" in out


def test_branching(tmp_path):
    out = _run("branching.py", tmp_path)
    assert "--- pirate branch" in out
    assert "replay: 2/2 replies identical" in out


def test_custom_tool_format_is_added_in_under_30_lines_and_used_by_an_engine(tmp_path):
    out = _run("custom_tool_format.py", tmp_path)
    assert "tool calls: [('get_weather', {'city': 'Paris', 'note': '```ok```'})]" in out
    assert "streamed in 7-char pieces, same calls: True" in out
    assert "render -> parse round trip: True" in out
    assert "detected from a template: command_r" in out
    assert (
        "engine format: command_r" in out and "prompt shows the tools in this syntax: True" in out
    )
    assert "unregistered again: True" in out
    source = (EXAMPLES / "custom_tool_format.py").read_text().splitlines()
    start = source.index(next(line for line in source if "the whole format" in line))
    end = source.index(next(line for line in source if "using it" in line))
    assert end - start < 30  # the format itself, comments and blank lines included


def test_wrapper_app_lists_its_own_tools(tmp_path):
    # -i: piped input is read as REPL commands (without it, it would be a one-shot question)
    out = _run("wrapper_app.py", tmp_path, stdin="/tools\n/quit\n", args=("-i",))
    assert "word_count" in out and "remember" in out and "calculator" in out


def test_wrapper_apps_own_command_runs_and_refuses_bad_words_without_ending(tmp_path):
    (tmp_path / "notes.txt").write_text("buy milk\ncall Ada\nwater plants\n")
    lines = "/notes 2\n/notes two\n/notes 1 2\n/help notes\n/notes\n/quit\n"
    out = _run("wrapper_app.py", tmp_path, stdin=lines, args=("-i", "--model", "tiny"))
    first, rest = out.split("> /notes two", 1)
    assert "call Ada\nwater plants" in first and "buy milk" not in first
    assert "error: N is a whole number, got 'two'; usage: /notes [N]" in rest
    assert "error: give at most one number, e.g. /notes 3; usage: /notes [N]" in rest
    assert "usage: /notes [N]" in rest and "Show the last N notes that remember" in rest
    assert rest.rstrip().endswith("/quit")  # every line ran; the errors did not end it
    assert "buy milk\ncall Ada\nwater plants" in rest


@pytest.mark.slow
def test_train_adapter_reproduces_every_trained_answer(tmp_path):
    out = _run("train_adapter.py", tmp_path, timeout=600)
    assert "6/6 trained answers reproduced greedily with the adapter." in out


@pytest.mark.slow
def test_multi_adapter_rows_equal_their_solo_runs(tmp_path):
    out = _run("multi_adapter.py", tmp_path)
    assert out.count("same as alone") == 8 and "DIFFERENT" not in out
    assert "asked default                ran on ['formal']" in out


def test_inspect_model_measures_confidence_and_what_settings_do(tmp_path):
    out = _run("inspect_model.py", tmp_path)
    mean, ppl = re.search(r"12 tokens, mean logprob (-?[\d.]+), perplexity ([\d.]+)", out).groups()
    assert float(ppl) == pytest.approx(math.exp(-float(mean)), abs=0.01)
    assert re.search(r"reference answer 'B': rank [1-4] of 4 options", out)
    # engine.score: each option's exact logprob, and a reference answer's per-token surprise
    # whose mean and perplexity agree; the reference starts with the option 'B', so its first
    # token's surprise is that option's logprob.
    option_b = re.search(r"^ +'B': 1 token, logprob +(-[\d.]+)", out, re.M).group(1)
    table = out.split("3. a reference answer's perplexity")[1].split("\n4.")[0]
    row = r" (\d+\.\d{3})  (?:\(it\)|(['\"]).*\2)$"  # surprise, then the likeliest token
    surprises = [float(m[1]) for m in re.finditer(row, table, re.M)]
    count, mean, ppl = re.search(
        r"reference: (\d+) tokens, mean logprob (-?[\d.]+), perplexity ([\d.]+)", table
    ).groups()
    assert int(count) == len(surprises) > 1
    assert float(mean) == pytest.approx(-sum(surprises) / len(surprises), abs=2e-3)
    assert float(ppl) == pytest.approx(math.exp(-float(mean)), rel=1e-2)
    assert surprises[0] == pytest.approx(-float(option_b), abs=1e-3)
    # The first token's distribution: greedy reports the model's own (temperature 1), a lower
    # temperature sharpens it, a higher one flattens it, and min_p leaves fewer than 20 tokens.
    row = r"^   (greedy|temperature=[\d.]+)(?: \(the model's own\))?  .* ([\d.]+) +[\d.]+  \d"
    top_p = {m[1]: float(m[2]) for m in re.finditer(row, out, re.M)}
    assert top_p["greedy"] == top_p["temperature=1.0"]
    assert top_p["temperature=0.7"] > top_p["temperature=1.0"] > top_p["temperature=1.5"]
    assert re.search(r"min_p=0\.3 .* 1\.000  ([1-9]|1\d) tokens?$", out, re.M)
    assert "40 requests in" in out
    assert "seed 7 rerun alone per setting: 5/5 replies identical" in out
