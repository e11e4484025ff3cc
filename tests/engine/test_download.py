# SPDX-License-Identifier: Apache-2.0
"""Downloads on request: offline by default, ``download=True`` fetches an uncached hub id.

The hub cannot be reached from the test machine, so these tests replace
``huggingface_hub``'s two entry points and check what mp13 asks of them: the
cache first, the network only with ``download=True``, which files, and the
errors and their advice.
"""

from __future__ import annotations

import shutil

import huggingface_hub
import pytest

from mp13_engine import ConfigError, Engine, EngineConfig, ModelNotFoundError, Request

HUB_ID = "mp13-test/uncached-model"


class FakeHub:
    """Records calls; serves ``model_dir`` as the snapshot once 'downloaded'."""

    def __init__(self, model_dir, tmp_path, files=None, cached=False, broken=False):
        self.model_dir = model_dir
        self.dest = tmp_path / "snapshot"
        self.files = files or ["config.json", "model.safetensors", "tokenizer.json"]
        self.cached = cached
        self.broken = broken
        self.snapshot_calls: list[dict] = []
        self.listed: list[str] = []

    def snapshot_download(self, repo_id, **kwargs):
        self.snapshot_calls.append({"repo_id": repo_id, **kwargs})
        if kwargs.get("local_files_only") and not self.cached:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache")
        if self.broken:
            raise OSError("Network is unreachable")
        if not self.dest.exists():
            shutil.copytree(self.model_dir, self.dest)
        return str(self.dest)

    def api(self):
        hub = self

        class Api:
            def list_repo_files(self, repo_id, **kwargs):
                hub.listed.append(repo_id)
                if hub.broken:
                    raise OSError("Network is unreachable")
                return hub.files

        return Api()


@pytest.fixture
def hub(monkeypatch, tiny_model_path, tmp_path):
    fake = FakeHub(tiny_model_path, tmp_path)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "HfApi", fake.api)
    return fake


def test_offline_by_default_and_the_error_names_the_download_option(hub):
    with pytest.raises(ModelNotFoundError) as info:
        Engine.load(HUB_ID, device="cpu")
    message = str(info.value)
    assert "EngineConfig(download=True)" in message and "mp13chat --download" in message
    assert [c["local_files_only"] for c in hub.snapshot_calls] == [True]
    assert hub.listed == []  # the network was never asked


def test_download_true_fetches_config_tokenizer_and_one_copy_of_the_weights(hub, monkeypatch):
    import transformers

    hub.files = ["config.json", "model.safetensors", "pytorch_model.bin", "onnx/model.onnx"]
    seen: list[tuple] = []
    original = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, source, *args, **kwargs):
        seen.append((source, kwargs))
        return original(cls, source, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    events: list = []
    with Engine.load(HUB_ID, device="cpu", download=True, progress=events.append) as engine:
        assert engine.generate(Request(prompt="hello", max_new_tokens=2)).ok
    first, second = hub.snapshot_calls
    assert first["local_files_only"] is True  # the cache is tried first
    assert second["local_files_only"] is False
    patterns = second["allow_patterns"]
    assert "*.safetensors" in patterns and "*.bin" not in patterns and "*.json" in patterns
    assert not any("onnx" in p for p in patterns)
    ((source, kwargs),) = seen
    assert source == str(hub.dest)  # transformers reads the downloaded snapshot
    assert kwargs["local_files_only"] is False
    assert [e.stage for e in events if e.stage != "load"] == ["download", "ready"]
    assert HUB_ID in events[0].message


def test_a_repo_with_only_bin_weights_downloads_them(hub):
    hub.files = ["config.json", "pytorch_model.bin", "tokenizer.json"]
    Engine.load(HUB_ID, device="cpu", download=True).close()
    patterns = hub.snapshot_calls[-1]["allow_patterns"]
    assert "*.bin" in patterns and "*.py" not in patterns  # no code unless trusted


def test_trust_remote_code_also_downloads_the_model_code(hub):
    hub.files = ["config.json", "model.safetensors", "modeling_custom.py", "tokenizer.json"]
    Engine.load(HUB_ID, device="cpu", download=True, trust_remote_code=True).close()
    assert "*.py" in hub.snapshot_calls[-1]["allow_patterns"]


def test_download_true_uses_the_cache_without_the_network(hub):
    hub.cached = True
    Engine.load(HUB_ID, device="cpu", download=True).close()
    assert [c["local_files_only"] for c in hub.snapshot_calls] == [True]
    assert hub.listed == []


def test_a_failed_download_says_what_to_check(hub):
    hub.broken = True
    with pytest.raises(ModelNotFoundError) as info:
        Engine.load(HUB_ID, device="cpu", download=True)
    message = str(info.value)
    assert "cannot download" in message and "Network is unreachable" in message
    assert "HF_TOKEN" in message


def test_a_gguf_only_repo_says_to_load_the_file(hub):
    hub.files = ["README.md", "model.Q4_K_M.gguf", "model.Q8_0.gguf"]
    with pytest.raises(ModelNotFoundError, match="GGUF files only") as info:
        Engine.load(HUB_ID, device="cpu", download=True)
    assert "model.Q4_K_M.gguf" in str(info.value)


def test_a_named_model_given_as_a_hub_id_points_at_models_fetch(hub):
    with pytest.raises(ModelNotFoundError, match=r"models\.fetch\('smollm2-135m'\)"):
        Engine.load("smollm2-135m", device="cpu")


def test_download_is_a_config_field(tmp_path):
    config = EngineConfig(model="x", download=True)
    assert config.download and not config.local_files_only
    config.to_json(tmp_path / "c.json")
    assert EngineConfig.from_json(tmp_path / "c.json").download
    assert not EngineConfig(model="x").download  # offline by default
    # transformers' spelling is not a field (no release ever had it): the error names ours
    with pytest.raises(ConfigError, match=r"unknown EngineConfig.*local_files_only.*download"):
        EngineConfig.from_dict({"model": "x", "local_files_only": True})
    with pytest.raises(ConfigError, match="download"):
        EngineConfig(model="x", download="yes")
