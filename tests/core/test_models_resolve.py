"""One way to find a model: `resolve(ref, role)`, the defaults said once in the catalogue, and
LLMConfig, the LLM options every LLM stage shares."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vi.core.errors import ModelNotAvailable
from vi.core.models import catalog, sources
from vi.core.models.catalog import CATALOG
from vi.core.models.resolve import ROLES, resolve

VI = Path(__file__).resolve().parents[2]
DEFAULTS = {name: value for name, value in vars(catalog).items()
            if (name.startswith("DEFAULT_") or name.endswith("_LLM") or name.endswith("_TEXT_EMBEDDING"))
            and isinstance(value, str)}


# --- the roles -------------------------------------------------------------------------------

def test_every_role_of_the_catalogue_has_a_resolver_and_an_unknown_role_is_a_usage_error():
    assert {spec.role for spec in CATALOG.values()} <= set(ROLES)
    with pytest.raises(ValueError, match="no model role 'nope'.*asr"):
        resolve("smollm2-135m", "nope")


def test_embedded_defaults_resolve_to_what_their_loaders_need():
    from vi.core.models.causal_lm import CausalLMSource
    from vi.core.models.chat_backend import LLMSpec
    from vi.core.models.text_embedding import EmbedderFiles

    gguf = resolve("smollm2-135m", "llm")
    assert isinstance(gguf, Path) and gguf.suffix == ".gguf"
    assert resolve("llama.cpp:smollm2-135m", "llm") == gguf
    assert isinstance(resolve("transformers:smollm2-135m", "llm"), CausalLMSource)
    assert resolve("transformers:smollm2-135m", "causal-lm") == resolve("smollm2-135m", "causal-lm")
    server = resolve("openai:m@http://127.0.0.1:1/v1", "llm")  # nothing contacted: check_llm does that
    assert server == LLMSpec("openai", "m", "http://127.0.0.1:1/v1")
    assert isinstance(resolve(catalog.DEFAULT_TEXT_EMBEDDING, "text-embedding"), EmbedderFiles)
    assert resolve(catalog.DEFAULT_IMAGE_CLASSIFIER, "image-classifier").suffix == ".pth"
    assert (resolve(catalog.DEFAULT_ASR, "asr") / "model.bin").is_file()


def test_a_missing_model_names_the_reference_what_to_fetch_and_vi_models(monkeypatch):
    monkeypatch.setattr(sources, "hub_snapshot", lambda repo_id: None)  # an empty hub cache
    monkeypatch.delenv("VI_ALLOW_DOWNLOAD", raising=False)
    for ref, role, fetch in [("dinov2-base", "dino", catalog.DEFAULT_DINO),
                             ("llava-onevision-7b", "vlm", catalog.DEFAULT_VLM),
                             (catalog.DEFAULT_DETECTOR, "detector", catalog.DEFAULT_DETECTOR),
                             ("nobody-vi-test/no-such-model", "text-embedding", "nobody-vi-test/no-such-model")]:
        with pytest.raises(ModelNotAvailable) as caught:
            resolve(ref, role)
        message = str(caught.value)
        assert ref in message and f"hf download {fetch}" in message and "vi models" in message, message
    with pytest.raises(ModelNotAvailable, match="is a text-embedding model, not a vlm model"):
        resolve("minilm-l6", "vlm")


def test_a_pipelines_role_joins_the_one_entry_point():
    from vi.pipelines.stepdiff import video_encoder

    spec = resolve(catalog.DEFAULT_IMAGE_CLASSIFIER, "video-encoder", frames=4)
    assert isinstance(spec, video_encoder.EncoderSpec) and spec.frames == 4 and spec.weights.is_file()


# --- each default said once -----------------------------------------------------------------

def test_every_default_reference_is_in_the_catalogue():
    repos = {spec.source.repo_id for spec in CATALOG.values() if isinstance(spec.source, sources.HubRepo)}
    for name, ref in DEFAULTS.items():
        ref = ref.removeprefix("open_clip:")
        assert ref in CATALOG or ref in repos, f"{name} = {ref!r} is not in `vi models`"


def test_no_stage_repeats_a_default_reference():
    """The stages import the DEFAULT_* names; a quoted reference in their code would drift."""
    literals = set(DEFAULTS.values())
    found = []
    for folder in ("pipelines", "evaluation"):
        for path in (VI / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in literals:
                    found.append(f"{path.relative_to(VI)}:{node.lineno} {node.value!r}")
    assert not found, "say these with the catalogue's DEFAULT_* names:\n" + "\n".join(found)


# --- LLMConfig ---------------------------------------------------------------------------------

def test_llm_config_declares_the_shared_llm_options_once():
    from vi.core.config import cli_fields, with_default
    from vi.core.models.chat import LLMConfig, LLMSettings

    fields = {f.name: f for f in cli_fields(LLMConfig)}
    assert list(fields) == ["llm", "n_ctx", "threads", "concurrency", "device", "seed"]
    assert fields["llm"].default == catalog.DEFAULT_LLM
    assert fields["llm"].metadata["flag"] == "--llm" and fields["llm"].metadata["hidden_aliases"] == ("--model",)
    assert all(f.metadata["help"] for f in fields.values())

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class JudgeConfig(LLMConfig):
        n_ctx: int = with_default(LLMConfig, "n_ctx", 2048)
        prompt: str = "eval"

    config = JudgeConfig(llm="smollm2-135m", threads=2)
    assert config.llm_settings == LLMSettings("smollm2-135m", n_ctx=2048, device="auto", seed=0, threads=2,
                                              concurrency=1)
    with pytest.raises(TypeError):
        JudgeConfig("smollm2-135m")  # keywords only: a subclass's own fields may come in any order


# --- what importing costs, and the chat modules' import order ------------------------------------

def test_the_resolver_catalogue_and_chat_import_no_model_library():
    script = ("import sys, vi.core.models.resolve, vi.core.models.chat, vi.core.models.catalog; "
              "print([m for m in ('torch', 'transformers', 'open_clip', 'llama_cpp') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_chat_backends_import_the_shared_types_not_the_module_that_picks_them():
    for name in ("hf_chat", "openai_chat", "llm", "chat_backend"):
        tree = ast.parse((VI / "core" / "models" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "vi.core.models.chat" not in imported, name


@pytest.mark.parametrize("user_value", [None, "ACTIVE"])
def test_llama_cpp_loads_with_passive_openmp_threads_unless_the_user_said_otherwise(user_value):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user_value:
        env["OMP_WAIT_POLICY"] = user_value
    script = ("import json, os; from vi.core.models.llm import gpu_offload_supported; gpu_offload_supported(); "
              "print(json.dumps(os.environ.get('OMP_WAIT_POLICY')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == (user_value or "PASSIVE")
