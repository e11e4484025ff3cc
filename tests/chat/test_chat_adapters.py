# SPDX-License-Identifier: MIT
"""Adapters in REPL terms: the adapters folder (where /train saves, what loads again at
the next start, short names) and errors that name REPL commands, not Python."""

from __future__ import annotations

import json
import pathlib

import pytest

from mp13chat._adapter_folder import adapters_dir, discover, same_model
from mp13chat._cmd_engine import _training_config
from tests.chat._output import table_rows

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> pathlib.Path:
    from mp13_engine.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", family="chatml", seed=0)


def _peft_adapter(base_path: pathlib.Path, dest: pathlib.Path, seed: int = 1) -> None:
    """A plain-PEFT LoRA adapter with random weights (PEFT records base_path as its base)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = get_peft_model(
            base,
            LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", init_lora_weights=False),
        )
    model.save_pretrained(dest)


@pytest.fixture(scope="module")
def saved(tiny_path, tmp_path_factory) -> pathlib.Path:
    """An adapters folder: 'mine' (this model), 'theirs' (another model), 'notes' (no
    adapter) — as /train would leave it over a few sessions on different models."""
    folder = tmp_path_factory.mktemp("config") / "adapters"
    _peft_adapter(tiny_path, folder / "mine")
    _peft_adapter(tiny_path, folder / "theirs", seed=2)
    config = folder / "theirs" / "adapter_config.json"
    data = json.loads(config.read_text())
    config.write_text(json.dumps({**data, "base_model_name_or_path": "org/another-model"}))
    (folder / "notes").mkdir()
    # what an adapter save cut short leaves beside the folder it replaces
    _peft_adapter(tiny_path, folder / ".mine.mp13-old", seed=3)
    return folder


@pytest.fixture
def engine(tiny_path):
    from mp13_engine import Engine

    with Engine.load(str(tiny_path), device="cpu", dtype="float32") as eng:
        yield eng


def test_the_folder_is_next_to_the_config_unless_the_engine_config_names_one(tmp_path):
    assert adapters_dir({}, tmp_path) == tmp_path / "adapters"
    assert adapters_dir({"adapters_dir": "~/lora"}, tmp_path) == pathlib.Path.home() / "lora"
    assert adapters_dir({}, None) is None


def test_same_model_compares_folders_by_their_real_path(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    assert same_model(str(tmp_path / "m"), str(tmp_path / "link"))
    assert same_model("org/model", "org/model")
    assert not same_model("org/model", str(tmp_path / "m"))


def test_discover_loads_only_this_models_adapters(engine, saved, tiny_path):
    found = discover(engine.adapters, saved, str(tiny_path))
    # 'theirs' is left on disk, and so is the hidden leftover of a cut-short save
    assert found.loaded == ("mine",) and not found.failed
    assert [a.name for a in engine.adapters.list()] == ["mine"]
    assert discover(engine.adapters, saved, str(tiny_path)).loaded == ()  # already there


def test_adapters_saved_before_are_loaded_again_at_start(make_chat, engine, saved):
    h = make_chat(engine, app_kwargs={"config_path": saved.parent / "config.json"})
    assert [a.name for a in engine.adapters.list()] == ["mine"]
    out = h.console.file.getvalue()
    assert f"adapters from {saved}: mine" in out
    out = h.run("/adapters use mine", "/engine")
    assert "this branch uses mine" in out and str(saved) in out


def test_unknown_adapter_errors_name_repl_commands(make_chat, engine, tiny_path, tmp_path):
    h = make_chat(engine)
    out = h.run("/adapters use nope", "/adapters unload nope", "/adapters save nope x")
    assert out.count("no adapter named 'nope' is loaded") == 3
    assert "/adapters load PATH nope" in out
    assert "engine.adapters" not in out  # the engine's own message speaks Python
    assert h.app.cursor.adapters.show() is None  # nothing recorded on the branch
    # an adapter in the adapters folder loads by its bare name, and the hint says so
    _peft_adapter(tiny_path, tmp_path / "adapters" / "saved")
    out = h.run("/adapters use saved")
    assert "/adapters load saved loads it" in out
    out = h.run("/adapters load saved", "/adapters use saved")
    assert "loaded saved" in out and "this branch uses saved" in out
    # loading it again says what to type, not the engine's replace=True
    out = " ".join(h.run("/adapters load saved").split())
    assert "an adapter named 'saved' is already loaded; /adapters use saved uses it" in out
    assert "replace=True" not in out
    out = h.run("/adapters load nowhere")
    assert "'nowhere' is not an adapter folder" in out and str(tmp_path / "adapters") in out
    assert "EngineConfig" not in out


def test_asking_on_a_branch_whose_adapter_was_unloaded_says_how_to_go_on(
    make_chat, engine, tiny_path, tmp_path
):
    _peft_adapter(tiny_path, tmp_path / "adapters" / "gone")
    h = make_chat(engine, params={"max_new_tokens": 2})
    h.run("/adapters load gone", "/adapters use gone", "/adapters unload gone")
    out = h.run("hello")
    assert "this branch uses adapter 'gone', which is not loaded" in out
    assert "/adapters load gone" in out and "/adapters base" in out
    assert "engine.adapters" not in out
    assert h.app.cursor.turn is None  # nothing was sent, nothing recorded


def test_train_saves_under_the_adapters_folder(tmp_path):
    config = _training_config(["fact", "data.jsonl", "max_steps=3"], tmp_path / "adapters")
    assert config.output_dir == str(tmp_path / "adapters" / "fact")
    assert config.max_steps == 3
    mine = _training_config(["fact", "d.jsonl", f"output_dir={tmp_path}/x"], tmp_path)
    assert mine.output_dir == f"{tmp_path}/x"  # an explicit output_dir wins
    # An app without a config file has no adapters folder: the engine picks the folder.
    assert _training_config(["fact", "d.jsonl"], None).output_dir is None


def test_an_unknown_training_option_lists_the_options_not_a_python_class(tmp_path):
    from mp13chat import UsageError

    with pytest.raises(UsageError) as error:
        _training_config(["fact", "d.jsonl", "max_step=3"], tmp_path)
    message = str(error.value)
    assert "unknown training option max_step (did you mean 'max_steps'?)" in message
    assert "TrainingConfig" not in message


def test_training_options_take_the_python_spelling_the_engine_advises(tmp_path):
    """The engine's advice reads overwrite=True; typed as is, it is the boolean, not 'True'."""
    config = _training_config(
        ["fact", "d.jsonl", "overwrite=True", "gradient_checkpointing=False"], tmp_path
    )
    assert config.overwrite is True and config.gradient_checkpointing is False


@pytest.mark.slow
def test_an_adapter_trained_in_the_repl_is_there_on_the_next_start(make_chat, tiny_path, tmp_path):
    from mp13_engine import Engine

    data = tmp_path / "data.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        for i in range(4)
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    with Engine.load(str(tiny_path), device="cpu", dtype="float32") as first:
        h = make_chat(first)
        out = h.run(f"/train start fact {data} max_steps=2 batch_size=2", timeout=120)
        assert "training done" in out
        assert (tmp_path / "adapters" / "fact" / "adapter_config.json").is_file()
        # the same name again: the option to type, not the engine's Python spelling
        out = " ".join(h.run(f"/train start fact {data} max_steps=1").split())
        assert "add continue_training=true overwrite=true to train fact further" in out
        assert "continue_training=True" not in out
        # ... and the advice, typed as given, trains it further
        out = h.run(
            f"/train start fact {data} max_steps=1 continue_training=true overwrite=true",
            timeout=120,
        )
        assert "training done: adapter fact" in out
    with Engine.load(str(tiny_path), device="cpu", dtype="float32") as second:
        again = make_chat(second)
        assert "fact" in second.adapters
        assert "adapters from" in again.console.file.getvalue()


def test_every_branch_adapter_change_says_what_the_branch_uses_now(make_chat, engine, saved):
    h = make_chat(engine, app_kwargs={"config_path": saved.parent / "config.json"})
    out = h.run("/adapters use mine", "/adapters base", "/adapters pop", "/adapters default")
    said = [line.strip() for line in out.splitlines() if "this branch uses" in line]
    assert said == [
        "this branch uses mine",
        "this branch uses the base model",
        "this branch uses mine",
        "this branch uses the engine's default adapters",
    ]


def test_a_broken_adapter_in_the_folder_is_named_at_start_and_the_rest_load(
    make_chat, engine, saved, tmp_path
):
    import shutil

    folder = tmp_path / "adapters"
    shutil.copytree(saved / "mine", folder / "mine")
    (folder / "broken").mkdir()
    (folder / "broken" / "adapter_config.json").write_text("{not json")
    h = make_chat(engine)
    out = " ".join(h.console.file.getvalue().split())
    assert f"adapters from {folder}: mine" in out
    assert "adapter broken not loaded:" in out
    assert [a.name for a in engine.adapters.list()] == ["mine"]
    # a folder given by its full path loads under its own name
    out = h.run(f"/adapters load {saved / 'mine'} again")
    assert "loaded again (rank 2)" in out


def test_no_adapters_folder_or_another_engine_loads_nothing(make_chat, engine, saved, tmp_path):
    from mp13_context.testing import FakeEngine

    found = discover(engine.adapters, tmp_path / "none", "any")
    assert found.loaded == () and found.failed == ()
    h = make_chat(FakeEngine(), app_kwargs={"config_path": saved.parent / "config.json"})
    assert "adapters from" not in h.console.file.getvalue()


def test_the_progress_bar_words_a_queued_job_as_queued_not_as_step_zero():
    """QUEUED and STARTED carry step 0; the bar said "step 0/N" for both."""
    from mp13_engine import TrainingEvent, TrainingEventKind
    from mp13chat._cmd_engine import _progress_info

    def info(kind: TrainingEventKind, **fields: object) -> str:
        return _progress_info(TrainingEvent(kind=kind, step=0, max_steps=2, **fields))

    assert info(TrainingEventKind.QUEUED) == "queued (jobs run one at a time)"
    assert info(TrainingEventKind.STARTED) == "started"
    assert (
        info(TrainingEventKind.STEP, loss=1.5, tokens_per_s=99.6)
        == "step 0/2 loss 1.5000 100 tok/s"
    )


def test_adapters_with_none_loaded_says_how_to_get_one(make_chat, engine, tiny_path, tmp_path):
    # An engine without adapters showed an empty table: six headers and nothing else.
    h = make_chat(engine)
    out = " ".join(h.run("/adapters").split())
    assert "no adapters loaded; /train start NAME FILE trains one" in out
    assert "/adapters load PATH|NAME loads a PEFT adapter folder" in out
    assert "┃" not in out  # no empty table
    assert "this branch uses the engine's default adapters" in out
    _peft_adapter(tiny_path, tmp_path / "one")
    out = h.run(f"/adapters load {tmp_path / 'one'}", "/adapters")
    assert "no adapters loaded" not in out and "one" in table_rows(out)
