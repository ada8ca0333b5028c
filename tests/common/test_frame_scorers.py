"""The frame scorers of `vi align-frames` and the loaders behind them: open_clip (on a tiny
randomly initialised model written here), EfficientNet-Lite0 + MiniLM on real photos, the
sentence embedder against sentence-transformers, and the random baseline."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from vi.core.devices import resolve_placement
from vi.core.errors import ModelNotAvailable
from vi.core.models import text_embedding, vision
from vi.pipelines.common import frame_scorers
from vi.pipelines.common.frame_scorers import ScorerChoice

PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")
CPU = resolve_placement("cpu", "float32")
TINY_CLIP = {  # about 3.5 M parameters, most of them the 49,408-token embedding
    "embed_dim": 32,
    "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def make_tiny_clip(folder: Path, resize_mode: str = "shortest") -> dict[str, Path]:
    """A random tiny open_clip model, saved three ways: a config .json plus a bare checkpoint,
    and a folder with open_clip_config.json (the layout of an open_clip hub repo)."""
    import open_clip
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    arch = folder / "tiny-test-clip.json"
    arch.write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(arch)
    torch.manual_seed(0)
    model = open_clip.create_model("tiny-test-clip")
    checkpoint = folder / "tiny.pt"
    torch.save(model.state_dict(), checkpoint)
    repo = folder / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "open_clip_config.json").write_text(json.dumps(
        {"model_cfg": TINY_CLIP, "preprocess_cfg": {"resize_mode": resize_mode}}))
    torch.save(model.state_dict(), repo / "open_clip_pytorch_model.bin")
    return {"arch": arch, "checkpoint": checkpoint, "repo": repo}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory) -> dict[str, Path]:
    return make_tiny_clip(tmp_path_factory.mktemp("tiny_clip"))


def clip_scorer(source: vision.ClipSource, batch_size: int = 4) -> frame_scorers.ClipScorer:
    return frame_scorers.ClipScorer(ScorerChoice("clip", source.label, clip=source), CPU, batch_size)


def random_frames(count: int, height: int = 90, width: int = 160, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, height, width, 3), dtype=np.uint8)


# --- open_clip, through the real loader ---------------------------------------------------

def test_a_checkpoint_file_with_its_arch_and_a_model_folder_load_the_same_weights(tiny_clip):
    from_file = vision.resolve_clip(str(tiny_clip["checkpoint"]), str(tiny_clip["arch"]))
    from_folder = vision.resolve_clip(str(tiny_clip["repo"]))
    assert from_file.model_name == "tiny-test-clip" and from_file.pretrained == str(tiny_clip["checkpoint"])
    assert from_folder.model_name == f"local-dir:{tiny_clip['repo']}"
    frames, texts = random_frames(5), ["cut the onion", "boil the water", "serve"]
    a, b = clip_scorer(from_file, batch_size=2), clip_scorer(from_folder, batch_size=4)
    fa, fb = a.encode_frames(frames[:, :64, :64]), b.encode_frames(frames[:, :64, :64])
    assert fa.shape == (5, 32) and np.allclose(np.linalg.norm(fa, axis=1), 1, atol=1e-5)
    assert np.allclose(fa, fb, atol=1e-5)  # batch size and loading route change nothing
    ta = a.encode_texts(texts)
    assert ta.shape == (3, 32) and np.allclose(ta, b.encode_texts(texts), atol=1e-5)
    similarity = a.similarity(ta, fa)
    assert similarity.shape == (3, 5) and np.allclose(similarity, ta @ fa.T)
    assert np.all(np.abs(similarity) <= 1 + 1e-5)
    assert not np.allclose(fa[0], fa[1])  # different frames, different features


def test_the_clip_model_is_built_once_per_process(tiny_clip):
    from vi.core.models.cache import load_counts

    source = vision.resolve_clip(str(tiny_clip["checkpoint"]), "ViT-B-32")  # a name, not a file
    assert source.model_name == "ViT-B-32" and source.arch_file is None
    folder = vision.resolve_clip(str(tiny_clip["repo"]))
    first = vision.load_clip(folder, CPU)
    assert vision.load_clip(folder, CPU) is first
    assert load_counts[("clip", folder, CPU)] == 1


def test_a_checkpoint_of_another_architecture_is_a_setup_error_not_a_random_model(tiny_clip):
    from vi.core.errors import SetupError

    wrong = vision.resolve_clip(str(tiny_clip["checkpoint"]), "RN50")
    with pytest.raises(SetupError, match="did not load"):
        vision.load_clip(wrong, CPU)


def test_clip_references_that_cannot_work_fail_at_once_and_say_what_to_do(tiny_clip, tmp_path):
    with pytest.raises(ValueError, match="--clip-arch"):
        vision.resolve_clip(str(tiny_clip["checkpoint"]))  # which architecture?
    with pytest.raises(ValueError, match="neither an open_clip model name"):
        vision.resolve_clip(str(tiny_clip["checkpoint"]), "ViT-Nonexistent-1")
    with pytest.raises(ValueError, match="no pretrained tag 'nonsense'.*openai"):
        vision.resolve_clip("ViT-B-32:nonsense")
    with pytest.raises(ModelNotAvailable, match="not an open_clip model folder"):
        vision.resolve_clip(str(tmp_path))
    with pytest.raises(ModelNotAvailable, match="unknown CLIP model"):
        vision.resolve_clip("no-such-model")
    with pytest.raises(ModelNotAvailable, match="hf download nobody-vi-test/no-such-clip"):
        vision.resolve_clip("hf-hub:nobody-vi-test/no-such-clip")


def test_a_pretrained_tag_and_the_catalogue_alias_name_what_to_download(monkeypatch):
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache("timm/vit_base_patch32_clip_224.openai", "open_clip_model.safetensors"),
                  str):
        pytest.skip("ViT-B-32:openai is in this machine's hub cache")
    monkeypatch.delenv("VI_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(ModelNotAvailable, match="hf download timm/vit_base_patch32_clip_224.openai"):
        vision.resolve_clip("ViT-B-32:openai")
    if vision.CATALOG["dfn5b-clip-vit-h-14"].available():
        pytest.skip("DFN5B is in this machine's hub cache")
    with pytest.raises(ModelNotAvailable, match="hf download apple/DFN5B-CLIP-ViT-H-14"):
        vision.resolve_clip("dfn5b-clip-vit-h-14")


@pytest.mark.parametrize("mode", ["shortest", "squash", "longest"])
def test_frames_decoded_at_decode_size_reach_the_encoder_input_exactly(mode):
    import torch

    for width, height in ((640, 360), (360, 640), (64, 64), (1920, 1080)):
        w, h = frame_scorers.decode_size(width, height, (64, 48), mode)
        x = frame_scorers.fit(torch.zeros(2, 3, h, w), (64, 48), mode)
        assert tuple(x.shape) == (2, 3, 64, 48), (mode, width, height)
        if mode == "shortest":
            assert min(w / 48, h / 64) == pytest.approx(1, abs=0.03)  # covers it, crop only
        if mode == "longest":
            assert max(w / 48, h / 64) == pytest.approx(1, abs=0.03)  # fits it, pad only


def test_shortest_crops_the_centre_and_longest_pads_with_the_fill_colour():
    import torch

    frame = torch.zeros(1, 3, 10, 30)
    frame[..., 10:20] = 1.0  # a white centre third
    assert frame_scorers.fit(frame, (10, 10), "shortest").min() == 1.0
    padded = frame_scorers.fit(torch.ones(1, 3, 10, 30), (30, 30), "longest", fill=0.5)
    assert padded[..., 15, 15].eq(1).all() and padded[..., 0, 15].eq(0.5).all()


# --- the offline default: ImageNet labels -------------------------------------------------

@pytest.fixture(scope="module")
def label_scorer() -> frame_scorers.ImageNetLabelScorer:
    return frame_scorers.make_scorer(frame_scorers.resolve_scorer("imagenet-labels"), CPU, 8)


def photo(name: str, scorer) -> np.ndarray:
    from PIL import Image

    path = PHOTOS / name
    if not path.exists():
        pytest.skip(f"{path} is absent: install the Debian package opencv-doc (make install does)")
    image = Image.open(path).convert("RGB")
    return np.asarray(image.resize(scorer.decode_size(*image.size)))


def test_imagenet_labels_match_steps_to_the_photos_that_show_them(label_scorer):
    names = ["apple.jpg", "orange.jpg", "butterfly.jpg", "squirrel_cls.jpg"]
    features = np.concatenate([label_scorer.encode_frames(photo(n, label_scorer)[None]) for n in names])
    assert features.shape == (4, 1000)
    assert np.allclose(features.sum(1), 1, atol=1e-5) and ((features > 0).sum(1) == frame_scorers.TOP_K).all()
    steps = ["Wash a green apple and cut it into cubes.", "Peel an orange and break it into segments.",
             "A monarch butterfly lands on the flowers.", "Put nuts on the fence to attract a squirrel."]
    similarity = label_scorer.similarity(label_scorer.encode_texts(steps), features)
    assert similarity.shape == (4, 4)
    # each step's own photo scores highest, and by a margin over the best other photo
    for i, step in enumerate(steps):
        others = np.delete(similarity[i], i)
        assert similarity[i, i] > others.max() + 0.1, (step, similarity[i])
    assert similarity[1, 1] > similarity[1, 3]  # "peel an orange": the orange over the squirrel


def test_imagenet_label_features_are_the_renormalised_top_k(label_scorer):
    frame = photo("orange.jpg", label_scorer)
    features = label_scorer.encode_frames(np.stack([frame, frame]))
    top = np.argsort(-features[0])[:2]
    names = frame_scorers.label_names()
    assert names[top[0]] == "orange" and np.allclose(features[0], features[1])
    assert len(names) == 1000 and names[948] == "Granny Smith apple"  # logit order kept


# --- the sentence embedder ----------------------------------------------------------------

@pytest.mark.slow
def test_the_text_embedder_matches_sentence_transformers():
    SentenceTransformer = pytest.importorskip("sentence_transformers").SentenceTransformer

    files = text_embedding.locate("minilm-l6")
    assert files.pooling == "mean_tokens" and files.max_length == 256
    texts = ["Peel an orange.", "Then cut a lemon in half and squeeze the juice over the fruit. " * 3, ""]
    ours = text_embedding.load_text_embedder("minilm-l6", CPU).encode(texts, batch_size=2)
    reference = SentenceTransformer(str(files.folder), device="cpu", local_files_only=True).encode(
        texts, normalize_embeddings=True)
    assert ours.shape == (3, 384) and ours.dtype == np.float32
    assert np.allclose(ours, reference, atol=1e-4)


def test_the_text_embedder_refuses_what_is_not_a_text_embedding_model(tmp_path):
    with pytest.raises(ModelNotAvailable, match="image-classifier model, not a text-embedding"):
        text_embedding.locate("efficientnet-lite0")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotAvailable, match="no config.json"):
        text_embedding.locate(tmp_path)


# --- choosing a scorer --------------------------------------------------------------------

def test_auto_uses_dfn5b_when_cached_and_the_label_scorer_otherwise(monkeypatch, caplog):
    class Spec:
        def __init__(self, available):
            self._available, self.install = available, "hf download apple/DFN5B-CLIP-ViT-H-14"

        def available(self):
            return self._available

    caplog.set_level(logging.INFO, logger="vi")
    monkeypatch.setattr(frame_scorers, "get_spec", lambda alias: Spec(False))
    assert frame_scorers.resolve_scorer("auto").kind == "imagenet-labels"
    assert "hf download apple/DFN5B-CLIP-ViT-H-14" in caplog.text and "--model imagenet-labels" in caplog.text
    cached = vision.ClipSource("dfn5b-clip-vit-h-14", "local-dir:/cache/dfn5b")
    monkeypatch.setattr(frame_scorers, "get_spec", lambda alias: Spec(True))
    monkeypatch.setattr(vision, "resolve_clip", lambda ref, arch=None: cached if ref == "dfn5b-clip-vit-h-14" else None)
    choice = frame_scorers.resolve_scorer("auto")
    assert choice.kind == "clip" and choice.clip is cached and choice.name == "dfn5b-clip-vit-h-14"


def test_clip_arch_without_a_checkpoint_file_is_refused():
    with pytest.raises(ValueError, match="--clip-arch goes with --model PATH"):
        frame_scorers.resolve_scorer("hf-hub:apple/DFN5B-CLIP-ViT-H-14", clip_arch="ViT-H-14")


def test_the_random_scorer_is_seeded_per_record_and_decodes_nothing():
    base = frame_scorers.RandomScorer()
    assert base.needs_pixels is False
    texts, frames = base.encode_texts(["a", "b"]), base.encode_frames(np.zeros((4, 0, 0, 3), np.uint8))
    one = base.for_record(7, "video-1").similarity(texts, frames)
    assert one.shape == (2, 4) and ((one >= 0) & (one < 1)).all()
    assert np.array_equal(one, base.for_record(7, "video-1").similarity(texts, frames))
    assert not np.array_equal(one, base.for_record(8, "video-1").similarity(texts, frames))
    assert not np.array_equal(one, base.for_record(7, "video-2").similarity(texts, frames))


def test_a_half_precision_placement_runs_under_autocast_and_gives_close_features(tiny_clip):
    source = vision.resolve_clip(str(tiny_clip["repo"]))
    half = resolve_placement("cpu", "bfloat16")
    full_scorer, half_scorer = clip_scorer(source), frame_scorers.ClipScorer(
        ScorerChoice("clip", source.label, clip=source), half, 4)
    frames = random_frames(3, 64, 64)
    a, b = full_scorer.encode_frames(frames), half_scorer.encode_frames(frames)
    assert b.dtype == np.float32 and not np.array_equal(a, b)  # bf16 arithmetic did happen
    assert np.allclose(a, b, atol=0.05)


def test_the_dfn5b_alias_is_found_in_the_hub_cache_and_auto_then_picks_it(tmp_path, monkeypatch):
    """A hub cache laid out as `hf download apple/DFN5B-CLIP-ViT-H-14` leaves it (weights
    replaced by an empty file: resolution reads no weights, only what is where)."""
    from huggingface_hub import constants

    commit = "0" * 40
    repo = tmp_path / "models--apple--DFN5B-CLIP-ViT-H-14"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (snapshot / "open_clip_pytorch_model.bin").write_bytes(b"")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    source = vision.resolve_clip("dfn5b-clip-vit-h-14")
    assert source.model_name == "ViT-H-14-quickgelu" and source.quick_gelu
    assert source.pretrained == str(snapshot / "open_clip_pytorch_model.bin")
    assert dict(source.preprocess)["resize_mode"] == "squash"  # open_clip's settings for the dfn5b tag
    choice = frame_scorers.resolve_scorer("auto")
    assert choice.kind == "clip" and choice.clip == source
