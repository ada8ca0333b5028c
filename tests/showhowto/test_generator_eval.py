"""`vi eval showhowto`: ShowHowTo's step faithfulness, scene consistency and task faithfulness on
hand-made features with known answers, and end to end on a small test set in the export layout, with
a tiny random open_clip model and a tiny random DINOv2 (identical images give identical features, so
the checks are built on exact copies of frames)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import jsonl, run_vi
from PIL import Image
from test_frame_scorers import make_tiny_clip

from vi.core.devices import resolve_placement
from vi.core.errors import ModelNotAvailable
from vi.evaluation.showhowto import generator_eval
from vi.evaluation.showhowto import generator_metrics as m
from vi.pipelines.showhowto.generator_data import read_dataset

CPU = resolve_placement("cpu", "float32")
TILE = 32


# --- the metrics on features with known answers ----------------------------------------

def test_zero_shot_credit_is_the_argmax_and_a_tie_at_the_top_shares_the_credit():
    texts = np.eye(3)
    images = np.array([[0.9, 0.1, 0.0], [0.2, 0.1, 0.7], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    credit = m.zero_shot_credit(images, texts, [0, 1, 0, 2])
    assert credit.tolist() == [1.0, 0.0, 0.5, 0.0]  # row 3: a tie of 0 and 1, its own class 2 not in it


def test_step_texts_that_repeat_are_one_class():
    classes, targets = m.step_targets(["cut", "boil", "cut"])
    assert classes == ["cut", "boil"] and targets == [0, 1, 0]


def test_scene_consistency_never_counts_the_input_image_itself():
    # database: 0 = input of video a, 1 = another frame of a, 2 = a frame of video b
    database = np.array([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]])
    videos = ["a", "a", "b"]
    image = np.array([[1.0, 0.0]])  # a copy of the input: nearest is the input itself...
    assert m.scene_credit(image, ["a"], [0], database, videos).tolist() == [0.0]  # ...excluded: b is next
    assert m.scene_credit(image, ["a"], [1], database, videos).tolist() == [1.0]  # (excluding another frame)
    # the same image for a sequence of video b whose input is frame 2: nearest is frame 0, of video a
    assert m.scene_credit(image, ["b"], [2], database, videos).tolist() == [0.0]
    # cosine, not dot product: a long vector of b is not nearer than a short one of a
    far = np.array([[0.3, 0.0], [0.0, 1.0], [5.0, 4.0]])
    assert m.scene_credit(np.array([[1.0, 0.0]]), ["a"], [1], far, videos).tolist() == [1.0]


def test_scene_consistency_ties_share_the_credit():
    database = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    credit = m.scene_credit(np.array([[2.0, 0.0]]), ["a"], [0], database, ["a", "a", "b", "c"])
    assert credit.tolist() == pytest.approx([1 / 3])  # three frames tied at cosine 1, one of them a's


def test_task_faithfulness_averages_l2_normalised_features():
    texts = np.eye(2)
    # unnormalised, the long first vector would win task 0; normalised, two of three images say task 1
    sequences = [np.array([[10.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), np.array([[3.0, 1.0]])]
    assert m.task_credit(sequences, texts, [1, 0]).tolist() == [1.0, 1.0]
    assert m.task_credit(sequences, texts, [0, 1]).tolist() == [0.0, 0.0]
    assert m.mean([]) is None and m.mean([1, 0, 0.5]) == 0.5


# --- a small test set in vi export showhowto's layout ------------------------------------

SEQUENCES = [  # key, id, title, video; every strip: input, step 1, step 2 = a copy of the input, step 3
    ("k0", "vid0/0", "Make tea", "v0.mp4"),
    ("k1", "vid1/0", "Make tea", "v1.mp4"),
    ("k2", "vid2/0", "Fix a bike", "v2.mp4"),
    ("k3", "vid3/0", None, None),  # no title: its task text is its id; no video: its key
]


def _tile(rng) -> np.ndarray:  # blocky noise: far from any other tile, exact after JPEG at 4:4:4
    return np.kron(rng.integers(0, 256, (TILE // 8, TILE // 8, 3)), np.ones((8, 8, 1))).astype(np.uint8)


@pytest.fixture(scope="module")
def testset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("testset")
    (root / "imgseqs").mkdir()
    rng, index = np.random.default_rng(0), {}
    for n, (key, rid, title, video) in enumerate(SEQUENCES):
        first, second, third = _tile(rng), _tile(rng), _tile(rng)
        strip = np.concatenate([first, second, first, third], axis=1)
        Image.fromarray(strip).save(root / "imgseqs" / f"{key}.jpg", quality=100, subsampling=0)
        prompts = [f"a scene {n}", f"first step {n}", f"second step {n}", f"third step {n}"]
        sidecar = {"id": rid, "prompts": prompts, "times": [0, 1, 2, 3], "video": video, "title": title}
        (root / "imgseqs" / f"{key}.json").write_text(json.dumps(sidecar))
        index[key] = prompts
    (root / "prompts.json").write_text(json.dumps(index))
    for seq in read_dataset(root):  # the copies survived the JPEG: the checks below rely on it
        tiles = [np.asarray(t) for t in seq.tiles()]
        assert np.array_equal(tiles[0], tiles[2]) and not np.array_equal(tiles[0], tiles[1])
    return root


def _generated(testset: Path, folder: Path, lines: list[dict]) -> Path:
    path = folder / "generated.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _source_record(testset: Path, folder: Path, key: str) -> dict:
    """A generated record whose step images are the sequence's own frames, saved losslessly."""
    seq = next(s for s in read_dataset(testset) if s.key == key)
    frames = []
    for j, tile in enumerate(seq.tiles()[1:], 1):
        tile.save(folder / f"{key}_{j}.png")
        frames.append(f"{key}_{j}.png")  # relative: read from the generated file's folder
    return {"id": seq.id, "image": "in.jpg", "prompts": seq.prompts,
            "generated": {"frames": frames, "strip": "s.jpg", "seed": 0, "steps": 4, "guidance": {}}}


def test_a_generated_file_that_cannot_be_scored_names_file_line_and_field(testset, tmp_path):
    sequences, good = read_dataset(testset), {"id": "vid0/0", "generated": {"frames": ["a.png"] * 3}}
    for lines, expected in [
        ([good], "line 1: generated.frames[0]: a.png: no such image file"),
        ([{**good, "generated": {"frames": ["a.png"]}}], "line 1: generated.frames must list 3 image paths"),
        ([{"id": "k0", "errors": ["x"]}, {"id": "vid0/0", "errors": ["y"]}], "line 2: id 'vid0/0' again"),
        (["not a record"], "line 1: not a record with an id"),
    ]:
        path = _generated(testset, tmp_path, lines)
        with pytest.raises(ValueError, match=re.escape(f"{path} {expected}")):
            generator_eval.read_generated(path, sequences, testset)
    only_failed = _generated(testset, tmp_path, [{"id": "k1", "errors": [{"message": "cuda out of memory"}]}])
    with pytest.raises(ValueError, match="no generated sequence to score; 1 record.*line 1: cuda out of memory"):
        generator_eval.evaluate(generator_eval.GeneratorEvalConfig(
            dataset=testset, generated=only_failed, clip="no-such-clip", dino="nowhere"))


def test_an_unknown_id_is_exit_2_naming_the_line_before_any_model_loads(testset, tmp_path):
    lines = [{"id": "vid1/0", "errors": [{"message": "x"}]}, {"id": "nope/1", "generated": {}}]
    done = run_vi("eval", "showhowto", "--dataset", str(testset), "--generated",
                  str(_generated(testset, tmp_path, lines)), "--clip", "no-such-clip", "--dino", "nowhere")
    assert done.returncode == 2 and done.stdout == ""
    assert f"{tmp_path / 'generated.jsonl'} line 2: id 'nope/1' is not a sequence of the test set" in done.stderr


def test_baselines_pick_their_frames_from_the_test_set(testset):
    sequences = read_dataset(testset)
    offsets = [0, 4, 8, 12]
    assert generator_eval.baseline_frames("copy", sequences, offsets, 0)[1] == [4, 4, 4]
    assert generator_eval.baseline_frames("source", sequences, offsets, 0)[2] == [9, 10, 11]
    draws = generator_eval.baseline_frames("random", sequences, offsets, 0)
    assert draws == generator_eval.baseline_frames("random", sequences, offsets, 0)  # seeded
    for i, frames in enumerate(draws):
        start = frames[0] - 1
        assert start in offsets and start != offsets[i] and frames == [start + 1, start + 2, start + 3]


def test_a_missing_dino_names_what_to_fetch(tmp_path):
    from vi.core.models import dino

    with pytest.raises(ModelNotAvailable, match="hf download nobody-vi-test/no-such-dino"):
        dino.resolve_dino("nobody-vi-test/no-such-dino")
    with pytest.raises(ModelNotAvailable, match="lacks config.json and preprocessor_config.json"):
        dino.resolve_dino(str(tmp_path))


# --- end to end, with tiny random models ---------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    import torch
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    folder = tmp_path_factory.mktemp("models")
    clip = make_tiny_clip(folder / "clip")
    torch.manual_seed(0)
    config = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          image_size=TILE, patch_size=8)
    Dinov2Model(config).save_pretrained(folder / "dino")
    BitImageProcessor(size={"shortest_edge": TILE}, crop_size={"height": TILE, "width": TILE},
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
                      ).save_pretrained(folder / "dino")
    return {"clip": clip["checkpoint"], "arch": clip["arch"], "dino": folder / "dino"}


def _evaluate(testset: Path, models: dict, method: str, **options) -> tuple[dict, list[dict]]:
    """In this process (the models load once for all the tests): the runner behind the command."""
    return generator_eval.evaluate(generator_eval.GeneratorEvalConfig(
        dataset=testset, method=method, clip=str(models["clip"]), clip_arch=str(models["arch"]),
        dino=str(models["dino"]), device="cpu", **options))


@pytest.mark.slow
def test_a_tiny_dino_folder_loads_once_and_maps_equal_images_to_equal_features(models, testset):
    from vi.core.models import dino
    from vi.core.models.cache import load_counts

    source = dino.resolve_dino(str(models["dino"]))
    model = dino.load_dino(source, CPU)
    assert dino.load_dino(source, CPU) is model and load_counts[("dino", source, CPU)] == 1
    tiles = read_dataset(testset)[0].tiles()
    feats = dino.image_features(model, tiles, batch_size=3)
    assert feats.shape == (4, 32)
    assert np.allclose(feats[0], feats[2], atol=1e-5) and not np.allclose(feats[0], feats[1], atol=1e-3)


@pytest.mark.slow
def test_source_copy_and_random_baselines(testset, models):
    source, rows = _evaluate(testset, models, "source")
    assert source["method"] == "source" and source["sequences"] == 4 and source["frames"] == 12
    assert source["scene_consistency"] == 1.0  # each frame's nearest test image is itself
    assert source["tasks"] == 3 and source["tasks_from_id"] == 1 and source["failed"] == 0
    assert source["models"] == {"clip": str(models["clip"]), "dino": str(models["dino"])}
    assert source["offline"] is False
    assert [r["key"] for r in rows] == ["k0", "k1", "k2", "k3"]
    assert rows[3]["task"] == "vid3/0" and rows[3]["video"] == "k3"
    assert np.mean([c for r in rows for c in r["step"]]) == pytest.approx(source["step_faithfulness"], abs=1e-4)

    copy, _ = _evaluate(testset, models, "copy")
    # three steps, one image: it is classified as exactly one of its three distinct step texts
    assert copy["step_faithfulness"] == pytest.approx(1 / 3, abs=1e-4)
    assert copy["scene_consistency"] == 1.0  # the input itself is excluded; its copy (step 2) is nearest
    assert copy["task_faithfulness"] in (0.0, 0.25, 0.5, 0.75, 1.0)

    random, _ = _evaluate(testset, models, "random", seed=3)
    assert random["scene_consistency"] == 0.0  # another video's frames: their nearest is themselves
    assert 0.0 <= random["step_faithfulness"] <= 1.0 and random["frames"] == 12


@pytest.mark.slow
def test_vi_eval_showhowto_scores_generated_frames_like_the_frames_they_copy_and_counts_failures(
        testset, models, tmp_path):
    lines = [_source_record(testset, tmp_path, "k2"),
             {"id": "vid1/0", "errors": [{"stage": "generate", "kind": "oom", "message": "out of memory"}]},
             {**_source_record(testset, tmp_path, "k0"), "id": "k0"},  # matched by KEY
             {"id": "vid3/0", "prompts": ["p"]}]  # never generated
    rows = tmp_path / "rows.jsonl"
    done = run_vi("eval", "showhowto", "--dataset", str(testset), "--clip", str(models["clip"]), "--clip-arch",
                  str(models["arch"]), "--dino", str(models["dino"]), "--device", "cpu", "--batch-size", "2",
                  "--generated", str(_generated(testset, tmp_path, lines)), "--per-sequence", str(rows), check=True)
    [result] = jsonl(done.stdout)
    assert result["method"] == "generated" and result["sequences"] == 2 and result["frames"] == 6
    assert result["failed"] == 2 and result["missing"] == 0 and result["offline"] is False
    assert [(f["line"], f["reason"]) for f in result["failed_records"]] == [(2, "out of memory"),
                                                                            (4, "no 'generated' field")]
    assert result["scene_consistency"] == 1.0
    assert "paper: source sequences" in done.stderr and "failed, not scored vid1/0 (line 2)" in done.stderr
    _, source_rows = _evaluate(testset, models, "source")
    expected = {r["key"]: r for r in source_rows}
    scored = jsonl(rows.read_text())
    assert [r["key"] for r in scored] == ["k0", "k2"]
    for row in scored:  # the same pixels, encoded in other batches and another process: the same credits
        assert row == expected[row["key"]]


@pytest.mark.slow
def test_without_the_papers_models_auto_falls_back_to_the_embedded_ones_and_says_so(testset, monkeypatch):
    from vi.core.models import vision

    try:
        vision.locate_imagenet_classifier()
    except ModelNotAvailable as exc:
        pytest.skip(f"the offline models are not installed: {exc}")

    class NotCached:
        install = "hf download apple/DFN5B-CLIP-ViT-H-14"

        def available(self):
            return False

    monkeypatch.setattr(generator_eval, "get_spec", lambda alias: NotCached())
    monkeypatch.setattr(generator_eval.dino, "dino_available", lambda ref: False)
    encoders = generator_eval.Encoders(generator_eval.resolve_text_image("auto", None),
                                       generator_eval.resolve_scene("auto"), CPU, batch_size=3)
    assert encoders.offline is True and encoders.text_image.kind == "imagenet-labels"
    assert encoders.labels == {"clip": "imagenet-labels:efficientnet-lite0+minilm-l6",
                               "dino": "efficientnet-lite0 (pooled features)"}
    # scene features: EfficientNet-Lite0's pooled 1280-d features, equal for equal images, any size
    tiles = read_dataset(testset)[1].tiles()
    feats = encoders.scene_features([*tiles, tiles[1].resize((48, 48))])
    assert feats.shape == (5, 1280) and np.allclose(feats[0], feats[2], atol=1e-5)
    assert not np.allclose(feats[0], feats[1], atol=1e-3)
    database = encoders.scene_features(tiles)
    # with the input (0) excluded, its nearest is its copy (2); frame 1's nearest is itself
    credit = m.scene_credit(database[[0, 1]], ["a", "a"], [0, 0], database, ["a", "b", "a", "b"])
    assert credit.tolist() == [1.0, 0.0]
