# SPDX-License-Identifier: MIT
"""The user config file: created on first run, documented, strict, located by env/flag."""

from __future__ import annotations

import json

import pytest

from mp13_toolbox import Mp13Error
from mp13chat import ChatConfigKeywordError
from mp13chat._config import (
    FIELD_HELP,
    ChatConfig,
    config_to_json,
    default_config_path,
    load_config,
    save_config,
)
from mp13chat._errors import ChatConfigError


def test_first_run_writes_defaults_with_help(tmp_path):
    path = tmp_path / "sub" / "config.json"
    config = load_config(path)
    assert config == ChatConfig()
    data = json.loads(path.read_text())
    assert set(data["_help"]) == set(FIELD_HELP)
    # every field is documented
    assert {k for k in data if not k.startswith("_")} == set(FIELD_HELP)


def test_round_trip(tmp_path):
    config = ChatConfig(
        model="/m", engine={"device": "cpu"}, system="Be terse.", params={"temperature": 0.5}
    )
    save_config(config, tmp_path / "c.json")
    assert load_config(tmp_path / "c.json") == config


def test_a_misspelt_keyword_is_a_config_error_naming_the_field_meant():
    """ChatConfig(markdwn=False), as a wrapper app builds it, raised attrs' bare TypeError."""
    with pytest.raises(ChatConfigKeywordError) as caught:
        ChatConfig(markdwn=False)
    message = str(caught.value)
    assert "ChatConfig got an unknown keyword 'markdwn' (did you mean 'markdown'?)" in message
    assert "Valid keywords: model, engine, session" in message
    assert isinstance(caught.value, ChatConfigError)
    assert isinstance(caught.value, Mp13Error)
    with pytest.raises(TypeError, match="did you mean 'show_reasoning'"):  # as it was caught
        ChatConfig(show_reasonning=False)


def test_unknown_field_is_named(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"modle": "x"}))
    with pytest.raises(ChatConfigError, match="modle"):
        load_config(tmp_path / "c.json")


def test_wrong_type_is_named(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"stream": "false"}))
    with pytest.raises(ChatConfigError, match="stream"):
        load_config(tmp_path / "c.json")


def test_bad_json_says_what_to_do(tmp_path):
    (tmp_path / "c.json").write_text("{nope")
    with pytest.raises(ChatConfigError, match="delete the file"):
        load_config(tmp_path / "c.json")


def test_config_location_order(tmp_path):
    assert default_config_path({"MP13_CONFIG_DIR": str(tmp_path)}) == tmp_path / "config.json"
    xdg = default_config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    assert xdg == tmp_path / "mp13" / "config.json"


def test_underscore_keys_are_ignored(tmp_path):
    data = config_to_json(ChatConfig(stream=False))
    data["_note"] = "mine"
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert load_config(tmp_path / "c.json").stream is False


def test_a_config_file_that_is_no_object_is_refused(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps(["model", "tiny"]))
    with pytest.raises(ChatConfigError, match=r"must hold a JSON object, not \['model', 'tiny'\]"):
        load_config(tmp_path / "c.json")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"params": {"temprature": 1}},
            "params: unknown parameter 'temprature' (did you mean 'temperature'?) (known: ",
        ),
        ({"params": {"temperature": "hot"}}, "params: invalid Request.temperature='hot'"),
        # each value is fine alone; together every request would refuse them at start
        ({"params": {"top_logprobs": 3}}, "params: top_logprobs=3 gives alternatives"),
        ({"tool_approvals": {"calculator": "maybe"}}, "tool_approvals: calculator: 'maybe' is"),
        (
            {"engine": {"devic": "cpu"}},
            "engine: unknown EngineConfig field(s) devic (did you mean 'device'?)",
        ),
    ],
)
def test_a_bad_entry_inside_a_field_names_the_file(tmp_path, fields, problem):
    # These failed the start with the library's message alone, not naming the config file.
    (tmp_path / "c.json").write_text(json.dumps(fields))
    with pytest.raises(ChatConfigError) as err:
        load_config(tmp_path / "c.json")
    assert str(err.value).startswith(f"bad config file {tmp_path / 'c.json'}: {problem}")


@pytest.mark.parametrize(
    ("fields", "problem"),
    [({"stream": "false"}, "stream is True or False, not 'false'"), ({"history": 0}, "not 0")],
)
def test_an_on_off_field_of_the_file_is_checked_by_chatconfigs_rule(tmp_path, fields, problem):
    # The file said only "invalid value for type, expected bool @ $.stream", by a second
    # check beside ChatConfig's own; now the one check names the field and the value.
    (tmp_path / "c.json").write_text(json.dumps(fields))
    with pytest.raises(ChatConfigError) as err:
        load_config(tmp_path / "c.json")
    assert str(err.value).startswith(f"bad config file {tmp_path / 'c.json'}: ChatConfig.")
    assert problem in str(err.value)


def test_entries_the_libraries_accept_load(tmp_path):
    fields = {
        "engine": {"device": "cpu", "max_batch_size": 4},
        "params": {
            "temperature": 0.5,
            "max_tool_rounds": 3,
            "seed": None,
            "logprobs": True,
            "top_logprobs": 3,
        },
        "tool_approvals": {"calculator": "allow", "current_time": "ask"},
    }
    (tmp_path / "c.json").write_text(json.dumps(fields))
    assert load_config(tmp_path / "c.json").params["max_tool_rounds"] == 3


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"params": {"temprature": 1}}, "ChatConfig: params: unknown parameter 'temprature'"),
        ({"tool_approvals": {"calculator": "always"}}, "ChatConfig: tool_approvals: calculator"),
        ({"engine": {"devic": "cpu"}}, "ChatConfig: engine: unknown EngineConfig field(s) devic"),
        ({"stream": "no"}, "ChatConfig.stream is True or False, not 'no'"),
        ({"history": 0}, "ChatConfig.history is True or False, not 0"),
        ({"threads": 0}, "ChatConfig.threads is a number of threads of at least 1"),
        ({"threads": True}, "ChatConfig.threads is a number of threads of at least 1"),
        ({"threads": "2"}, "ChatConfig.threads is a number of threads of at least 1"),
    ],
)
def test_a_wrapper_apps_config_is_checked_like_the_file_when_made(fields, problem):
    """A wrapper's ChatConfig(stream="no") streamed ("no" is truthy) and a params typo
    failed the start; both are now refused where the config is written."""
    with pytest.raises(ChatConfigError) as err:
        ChatConfig(**fields)
    assert str(err.value).startswith(problem)
    ok = ChatConfig(params={"temperature": 0.5}, stream=False, tool_approvals={"x": "ask"})
    assert ok.stream is False and ok.params == {"temperature": 0.5}
