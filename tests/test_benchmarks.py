# SPDX-License-Identifier: Apache-2.0
"""The benchmarks start as a user runs them from ``benchmarks/README.md``: every flag
is explained by ``--help``, a missing optional package or model ends the run with a
message saying what to install (not a traceback), and each script's smallest run
prints the machine's load, its table and its goal (those runs are ``slow``)."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

from tests.engine._bnb import WHY_NOT

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("bench_*.py"))


@pytest.fixture
def bench(monkeypatch):
    """Import a benchmark script as ``python benchmarks/NAME.py`` would see its folder."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))

    def load(name: str) -> types.ModuleType:
        return importlib.import_module(name)

    return load


def test_the_readme_lists_every_benchmark():
    readme = (BENCHMARKS / "README.md").read_text()
    assert SCRIPTS  # the glob found the scripts
    for name in SCRIPTS:
        assert f"`python benchmarks/{name}.py" in readme, name


def _undocumented_options(help_text: str) -> list[str]:
    """Options in the ``options:`` block of ``--help`` that have no help text."""
    lines = help_text.split("options:\n", 1)[1].splitlines()
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"  (-\S+(?: \S+)?(?:, --\S+(?: \S+)?)?)(\s{2,}\S.*)?$", line)
        if not m:
            continue
        follows = lines[i + 1] if i + 1 < len(lines) else ""
        if m.group(2) is None and not follows.startswith(" " * 24):
            missing.append(m.group(1))
    return missing


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_explains_every_flag(name, bench, capsys):
    with pytest.raises(SystemExit) as done:
        bench(name).main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ")
    assert "--repeats" in out or "--trials" in out or "--turns" in out  # how to run it shorter
    assert _undocumented_options(out) == [], out


def test_the_help_checker_sees_a_flag_without_help():
    text = "options:\n  -h, --help     show this\n  --size {a,b}\n  --lr LR        rate\n"
    assert _undocumented_options(text) == ["--size {a,b}"]


def test_training_without_trl_says_what_to_install_before_training(bench, monkeypatch, capsys):
    training = bench("bench_training")
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl raises ImportError
    built = []
    monkeypatch.setattr(training, "build_models", lambda *a, **k: built.append(a) or {})
    with pytest.raises(SystemExit) as done:
        training.main(["--size", "tiny"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "needs the 'trl' package" in err
    assert 'pip install -e ".[bench]"' in err
    assert built == []  # it stopped before building or training anything


def test_a_model_that_cannot_be_fetched_ends_the_run_with_the_reason(bench, monkeypatch, capsys):
    from mp13_engine import models
    from mp13_engine._errors import ModelFetchError

    common = bench("_bench_engine_common")

    def offline(name, **kwargs):
        raise ModelFetchError(f"could not download {name}: no network; connect and run again")

    monkeypatch.setattr(models, "fetch", offline)
    with pytest.raises(SystemExit) as done:
        common.resolve_model("smollm2-135m")
    assert done.value.code == 2
    assert "--model smollm2-135m: could not download smollm2-135m: no network" in (
        capsys.readouterr().err
    )


def test_a_broken_gguf_file_ends_the_run_with_the_reason(bench, tmp_path, capsys):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(SystemExit) as done:
        bench("_bench_engine_common").resolve_model(str(bad))
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"--model {bad}: " in err and "GGUF" in err


TOO_FEW_TOKENS = ("--size", "tiny", "--tokens", "2", "--repeats", "1")


@pytest.mark.slow
def test_adapters_with_too_few_tokens_to_batch_says_which_flag_to_raise(tmp_path):
    # Two forced tokens: the wave's first rows end before its last ones start, so the
    # wave never shares a step and would not measure a mixed batch; it must not be timed.
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_adapters.py"), *TOO_FEW_TOKENS],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "did not run as one batch" in done.stderr
    assert "give more --tokens" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_hub_id_not_in_the_cache_is_refused_before_anything_runs(bench, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as done:
        bench("_bench_engine_common").resolve_model("nobody/no-such-model")
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--model nobody/no-such-model: neither a local path" in err
    assert "hf download nobody/no-such-model" in err


def test_a_hub_id_in_the_local_cache_is_passed_on(bench, monkeypatch, tmp_path):
    from huggingface_hub import constants

    snapshot = tmp_path / "models--someone--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--someone--cached" / "refs").mkdir()
    (tmp_path / "models--someone--cached" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = bench("_bench_engine_common").resolve_model("someone/cached")
    assert resolved == ("someone/cached", "someone/cached")


def test_a_run_gets_a_scratch_folder_that_is_gone_after_it(bench, capsys):
    common = bench("_bench_engine_common")
    seen = []

    def measure(args):
        seen.append((args.workdir, args.workdir.is_dir(), args.model))

    common.run_benchmark(common.new_parser("doc"), measure, ["--model", "m"], pin_torch=False)
    ((workdir, existed, models),) = seen
    assert existed and models == ["m"]
    assert not workdir.exists()  # the tiny models built there do not pile up in /tmp
    out = capsys.readouterr().out
    assert out.startswith("load before: ") and "load after: " in out


def test_a_run_draws_no_transformers_bars_and_leaves_them_on_after(bench, tmp_path, capfd):
    """Each benchmark loads its models in a second, several times; a "Loading weights" bar
    for each split the tables. The run's own output stays; bars are back after the run."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "model")
    common = bench("_bench_engine_common")
    threads = torch.get_num_threads()
    try:
        common.run_benchmark(
            common.new_parser("doc"),
            lambda args: AutoModelForCausalLM.from_pretrained(path, local_files_only=True),
            [],
        )
    finally:
        torch.set_num_threads(threads)
    out, err = capfd.readouterr()
    assert out.startswith("load before: ") and "load after: " in out
    assert err == ""
    seen: list[object] = []
    previous = hf_logging.set_tqdm_hook(lambda f, a, kw: seen.append(kw.get("disable")) or f(*a))
    try:
        list(hf_logging.tqdm(range(2), desc="after the run"))
    finally:
        hf_logging.set_tqdm_hook(previous)
    assert seen == [None]


def test_trl_dataset_preparation_draws_no_bars_and_puts_the_switch_back(bench, capfd):
    """SFTTrainer's five ``Dataset.map`` passes each drew a bar into bench_training's table."""
    datasets = pytest.importorskip("datasets")
    from datasets.utils import are_progress_bars_disabled

    training = bench("bench_training")
    rows = datasets.Dataset.from_list([{"text": str(i)} for i in range(4)])
    with training.quiet_dataset_preparation():
        mapped = rows.map(lambda row: {"n": len(row["text"])}, desc="Tokenizing")
    assert mapped["n"] == [1, 1, 1, 1]
    assert capfd.readouterr().err == ""
    assert not are_progress_bars_disabled()


def test_quiet_runs_drop_only_the_library_notices_that_say_nothing(bench):
    """bench_adapters and bench_training used to ignore every warning and every log line
    below ERROR, the engine's own included; now only the named library notices go."""
    import logging
    import warnings

    from mp13_engine._compat import BNB_CPU_LOGGER, KERNELS_NOTICE

    common = bench("_bench_engine_common")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        common.quiet_libraries()
        warnings.warn_explicit(
            "`is_gradient_checkpointing` is deprecated and will be removed in v6.",
            FutureWarning,
            "modeling_utils.py",
            1,
            module="transformers.modeling_utils",
        )
        warnings.warn("a warning of ours about the run", UserWarning, stacklevel=1)
        warnings.warn("`other` is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == [
        "a warning of ours about the run",
        "`other` is deprecated",
    ]
    assert logging.getLogger("mp13_engine").isEnabledFor(logging.WARNING)
    record = logging.LogRecord(BNB_CPU_LOGGER, logging.WARNING, "", 0, KERNELS_NOTICE, (), None)
    assert not logging.getLogger(BNB_CPU_LOGGER).filter(record)


def test_trl_checkpointing_is_turned_off_by_its_current_name(bench):
    """bench_training passed SFTConfig(gradient_checkpointing=False), a name transformers 5.24
    deprecates (FutureWarning); TRL defaults it to True, so the new name must be set."""
    import dataclasses

    training = bench("bench_training")

    @dataclasses.dataclass
    class Older:
        gradient_checkpointing: bool = True

    assert training.checkpointing_argument(Older) == "gradient_checkpointing"
    from transformers import TrainingArguments

    if "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}:
        assert training.checkpointing_argument(TrainingArguments) == "activation_checkpointing"


def test_percentile_is_the_nearest_sample(bench):
    common = bench("_bench_engine_common")
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert common.percentile(values, 0.0) == 1.0
    assert common.percentile(values, 0.5) == 3.0
    assert common.percentile(values, 0.95) == 5.0


def test_context_benchmark_small_run_prints_load_and_goals(bench, tmp_path, capsys):
    bench("bench_context").main(["--turns", "50", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("load before: ")
    assert "load after: " in out
    assert "mp13_context benchmark: 50 turns per tree" in out
    assert re.search(r"reopen \+ resolve leaf \(s\)\s+\S+\s+0.5", out)


def test_the_toolcalls_decode_step_uses_the_cache_argument_the_model_takes(bench, tmp_path):
    """It passed ``past_key_values``, which transformers 5.24 deprecates (FutureWarning, gone
    in 5.40): the step now runs with every warning an error, and still measures a time."""
    import warnings

    from transformers import AutoModelForCausalLM

    from mp13_engine.testing import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = bench("bench_toolcalls").decode_step_s(model, 2, "cpu")
    assert 0 < step < 10


@pytest.fixture
def torch_threads():
    """Put back torch's thread count, which a benchmark's ``main`` pins to one."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _never(what: str):
    def called(*args, **kwargs):
        raise AssertionError(f"{what} ran before the run was refused")

    return called


def test_quantized_without_a_cpu_bitsandbytes_says_so_in_one_line_before_loading(
    bench, monkeypatch, capsys, torch_threads
):
    bitsandbytes = pytest.importorskip("bitsandbytes")
    quantized = bench("bench_quantized")
    monkeypatch.setattr(bitsandbytes, "supported_torch_devices", {"cuda"})
    monkeypatch.setattr(quantized, "resolve_model", _never("fetching the model"))
    monkeypatch.setattr(quantized, "serve", _never("loading the model"))
    with pytest.raises(SystemExit) as done:
        quantized.main([])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "quantization='4bit' on cpu" in err and "no backend for it" in err
    assert "install a bitsandbytes that supports cpu" in err


def test_quantized_without_bitsandbytes_says_what_to_install(
    bench, monkeypatch, capsys, torch_threads
):
    quantized = bench("bench_quantized")
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import bitsandbytes raises
    monkeypatch.setattr(quantized, "resolve_model", _never("fetching the model"))
    with pytest.raises(SystemExit) as done:
        quantized.main([])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "needs the bitsandbytes package" in err and "pip install bitsandbytes" in err


def test_quantized_with_a_model_that_cannot_be_had_ends_before_loading(
    bench, monkeypatch, capsys, torch_threads
):
    quantized = bench("bench_quantized")
    monkeypatch.setattr(quantized, "require_cpu_bitsandbytes", lambda: None)
    monkeypatch.setattr(quantized, "serve", _never("loading the model"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as done:
        quantized.main(["--model", "nobody/no-such-model"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--model nobody/no-such-model: neither a local path" in err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--prompts", "6"], "at most 5 prompts, got 6"),
        (["--prompts", "0"], "must be at least 1, got 0"),
        (["--tokens", "0"], "must be at least 1, got 0"),
        (["--reply-tokens", "0"], "must be at least 1, got 0"),
        (["--train-steps", "-1"], "must be 0 (skip) or more, got -1"),
    ],
)
def test_quantized_refuses_counts_it_cannot_run(bench, monkeypatch, capsys, flags, says):
    quantized = bench("bench_quantized")
    monkeypatch.setattr(quantized, "measure", _never("the run"))
    with pytest.raises(SystemExit) as done:
        quantized.main(flags)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert says in err and flags[0] in err


def test_quantized_defaults_are_the_readme_figures_run(bench, monkeypatch):
    quantized = bench("bench_quantized")
    seen = []
    monkeypatch.setattr(
        quantized, "run_benchmark", lambda ap, m, argv, **kw: seen.append(ap.parse_args(argv))
    )
    quantized.main([])
    (args,) = seen
    assert (args.model, args.tiny, args.repeats, args.tokens) == ("smollm2-135m", False, 5, 32)
    assert (args.prompts, args.reply_tokens, args.train_steps) == (5, 24, 50)


def test_matching_prefix_counts_equal_tokens_from_the_start(bench):
    prefix = bench("bench_quantized").matching_prefix
    assert prefix([1, 2, 3], [1, 2, 3]) == 3
    assert prefix([1, 2, 3], [1, 9, 3]) == 1  # a later match after a difference is not counted
    assert prefix([1, 2, 3], [4, 2, 3]) == 0
    assert prefix([1, 2, 3], [1, 2]) == 2  # one reply ended (EOS) before the other
    assert prefix([], [1]) == 0


def test_ttft_first_requests_are_measured_in_another_interpreter(bench):
    # The first-request table is only honest if nothing of torch was warmed up before.
    assert bench("bench_engine_ttft").in_fresh_process(os.getpid) != os.getpid()


@pytest.mark.parametrize("side", ["_engine_firsts", "_raw_firsts"])
def test_ttft_first_request_then_later_ones_each_time_real_text(bench, tmp_path, side):
    from mp13_engine.testing import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny", family="chatml", size="tiny")
    samples = getattr(bench("bench_engine_ttft"), side)(str(path), 2, 1)
    assert len(samples) == 3  # the first request, then --repeats later ones
    assert all(0 < s < 60 for s in samples)  # each saw streamed text (0.0: it never came)


# The smallest run of each engine benchmark, in a fresh process as a user starts it, and
# what its output must show: the load, the table's title with its goal.
SMALLEST = {
    "bench_engine_overhead": (
        ["--repeats", "1"],
        ("goal <= 1.05", "goal decode rate ratio >= 0.95"),
    ),
    "bench_engine_concurrency": (["--repeats", "1"], "goal engine/static <= 1.3"),
    # All three tables: side by side, first request after loading, a conversation's turns.
    "bench_engine_ttft": (
        ["--repeats", "1"],
        ("engine/streamer", "1st engine/raw", "turn 1/turn 2"),
    ),
    "bench_engine_cancel": (["--trials", "2"], "goal p95 <= 1 step"),
    "bench_engine_arrivals": (["--quick"], "goal mean <= 0.9, p95 <= 1.0"),
    "bench_toolcalls": (["--repeats", "1", "--steps", "2", "--calls", "2"], "(goal <= 2%)"),
    "bench_adapters": (["--size", "tiny", "--repeats", "1"], "(goal >= 0.85)"),
    "bench_training": (["--size", "tiny", "--steps", "2", "--repeats", "1"], "(goal within 5%)"),
    # No goal: it reports what quantizing costs and saves; the speed table's ratio column.
    "bench_quantized": (
        [
            "--tiny",
            "--repeats",
            "1",
            "--tokens",
            "4",
            "--prompts",
            "2",
            "--reply-tokens",
            "6",
            "--train-steps",
            "2",
        ],
        "x float32 (median)",
    ),
}


def test_every_engine_benchmark_has_a_smallest_run():
    assert sorted(SMALLEST) == sorted(set(SCRIPTS) - {"bench_context"})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_smallest_run_prints_load_table_and_goal(name, tmp_path):
    if name == "bench_quantized" and WHY_NOT is not None:
        pytest.skip(WHY_NOT)  # it ends with that one line (tested above), not a table
    args, goal = SMALLEST[name]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("load before: "), done.stdout[:500]
    assert "load after: " in done.stdout
    for shown in (goal,) if isinstance(goal, str) else goal:
        assert shown in done.stdout, done.stdout[-2000:]
    assert list(scratch.glob("mp13-bench-*")) == []  # the run's models were removed with it
