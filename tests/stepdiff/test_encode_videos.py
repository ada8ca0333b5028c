"""`vi encode-videos` and the feature store: the stored tokens are the encoders' own (a tiny random open_clip
ViT, the real EfficientNet-Lite0, a tiny random VideoMAE), each record comes out once with its tensor on
disk (after a kill too), bad records are error records, and a store refuses another encoder's tokens."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from conftest import ffmpeg, jsonl, run_vi
from safetensors import safe_open
from test_frame_scorers import make_tiny_clip
from vi.core.devices import resolve_placement
from vi.core.errors import ModelNotAvailable, SetupError
from vi.core.features import FeatureStore, FeatureWriter
from vi.core.models.video_encoder import resolve_video_encoder
from vi.pipelines.stepdiff import video_encoder as ve
from vi.core.sharding import Shard
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.stepdiff import encode_videos as ev
from vi.pipelines.stepdiff.describe import sample_times

CPU = resolve_placement("cpu", "float32")
FP16 = {"atol": 5e-3, "rtol": 5e-3}  # the store keeps float16


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """A 6 s video, red then green (96x64, 10 fps), a blue image, a tiny open_clip ViT and a tiny VideoMAE."""
    from PIL import Image
    from transformers import VideoMAEConfig, VideoMAEImageProcessor, VideoMAEModel

    root = tmp_path_factory.mktemp("encode")
    video = root / "red_green.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=red:s=96x64:d=3:r=10", "-f", "lavfi", "-i", "color=green:s=96x64:d=3:r=10",
           "-filter_complex", "[0][1]concat=n=2:v=1", "-pix_fmt", "yuv420p", str(video))
    image = root / "blue.png"
    Image.new("RGB", (80, 60), (0, 0, 255)).save(image)
    torch.manual_seed(0)
    videomae = root / "videomae"
    VideoMAEModel(VideoMAEConfig(image_size=32, patch_size=8, num_frames=8, tubelet_size=2, hidden_size=32,
                                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
                  ).save_pretrained(videomae)
    VideoMAEImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(videomae)
    return {"root": root, "video": video, "image": image, "clip": make_tiny_clip(root / "clip")["repo"],
            "videomae": videomae}


def good_records(media) -> list[dict]:
    v = str(media["video"])
    return [{"id": "red", "video": v, "start": 0, "end": 3}, {"id": "green", "video": v, "start": 3, "end": 6},
            {"id": "red_again", "video": v, "start": 0.0, "end": 3.0}, {"id": "whole", "video": v},
            {"id": "blue_image", "image": str(media["image"])}]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


BAD = {"late": "clip_outside_video", "backwards": "bad_interval", "gone": "missing_media", "nothing": "missing_field",
       "half": "missing_field"}


@pytest.fixture(scope="module")
def encoded(media):
    """One CLI run over good and bad records, three per chunk, into a fresh store."""
    v, good = str(media["video"]), good_records(media)
    bad = [{"id": "late", "video": v, "start": 4, "end": 9}, {"id": "backwards", "video": v, "start": 3, "end": 1},
           {"id": "gone", "video": str(media["root"] / "gone.mp4"), "start": 0, "end": 1},
           {"id": "nothing", "start": 0, "end": 1}, {"id": "half", "video": v, "start": 1}]
    rows = [good[0], bad[0], good[1], bad[1], good[2], bad[2], good[3], bad[3], good[4], bad[4]]
    store = media["root"] / "store"
    done = run_vi("encode-videos", "-i", str(write_jsonl(media["root"] / "in.jsonl", rows)), "--store", str(store),
                  "--encoder", f"open_clip:{media['clip']}", "--chunk-size", "3", "--batch-size", "5", "-q")
    return {"done": done, "rows": rows, "store": store, "out": jsonl(done.stdout)}


def test_every_record_comes_out_once_in_order_and_bad_ones_are_error_records_naming_the_fault(encoded):
    out = {r["id"]: r for r in encoded["out"]}
    assert encoded["done"].returncode == 3  # some records failed; the stream went on
    assert [r["id"] for r in encoded["out"]] == [r["id"] for r in encoded["rows"]]
    for clip_id, kind in BAD.items():
        assert [e["kind"] for e in out[clip_id]["errors"]] == [kind] and "features" not in out[clip_id]
    assert "'end'" in out["late"]["errors"][0]["message"] and "'end'" in out["half"]["errors"][0]["message"]
    assert "'video'" in out["nothing"]["errors"][0]["message"]
    store = FeatureStore(encoded["store"])
    for record in encoded["out"]:
        if record["id"] not in BAD:
            features = record["features"]
            assert features["shape"] == [8, 16, 64] and features["store"] == str(encoded["store"])
            assert features["encoder"].startswith("open_clip:") and "errors" not in record
            assert store.file(record["id"]).name == features["file"]  # the record names the chunk holding it
    assert sorted(store.ids()) == sorted(r["id"] for r in encoded["rows"] if r["id"] not in BAD)
    info = json.loads((encoded["store"] / "encoder.json").read_text())
    assert info == store.info and info["tokens_per_frame"] == 16 and info["dim"] == 64 and info["frames"] == 8


def test_stored_tokens_are_the_vits_own_patch_tokens_after_ln_post(media, encoded):
    import open_clip
    from decord import VideoReader

    config = json.loads((media["clip"] / "open_clip_config.json").read_text())["model_cfg"]
    model = open_clip.CLIP(**config).eval()  # built here, apart from vi's loader
    model.load_state_dict(torch.load(media["clip"] / "open_clip_pytorch_model.bin"))
    model.visual.output_tokens = True
    reader = VideoReader(str(media["video"]))
    for clip_id, start, end in (("red", 0, 3), ("green", 3, 6)):
        frames = reader.get_batch([round(t * 10) for t in sample_times(start, end, 8)]).asnumpy()
        x = torch.from_numpy(frames[:, :, 16:80]).permute(0, 3, 1, 2).float() / 255  # the centre 64x64
        mean, std = torch.tensor(open_clip.OPENAI_DATASET_MEAN), torch.tensor(open_clip.OPENAI_DATASET_STD)
        with torch.no_grad():
            _, tokens = model.visual((x - mean[:, None, None]) / std[:, None, None])
        assert torch.allclose(FeatureStore(encoded["store"]).get(clip_id), tokens, **FP16)


def test_colours_differ_the_same_clip_twice_is_identical_and_an_image_is_eight_equal_frames(encoded):
    store = FeatureStore(encoded["store"])
    red, green, image, whole = (store.get(i) for i in ("red", "green", "blue_image", "whole"))
    assert torch.equal(red, store.get("red_again")) and red.dtype == torch.float32
    assert (red - green).abs().max() > 0.1 and (red - image).abs().max() > 0.1
    assert image.shape == (8, 16, 64) and all(torch.equal(image[0], frame) for frame in image)
    assert torch.allclose(whole[:4], red[:4], **FP16) and torch.allclose(whole[4:], green[4:], **FP16)


def test_a_store_of_another_encoder_or_frame_count_is_refused_before_any_record(media, encoded):
    with pytest.raises(SetupError, match="frames=8.*frames=4"):
        ev.EncodeConfig(store=encoded["store"], encoder=f"open_clip:{media['clip']}", frames=4, device="cpu")
    done = run_vi("encode-videos", "--store", str(encoded["store"]), "--encoder", "efficientnet-lite0",
                  stdin=json.dumps(good_records(media)[0]) + "\n")
    assert done.returncode == 5 and done.stdout == ""
    assert "efficientnet-lite0" in done.stderr and "open_clip:" in done.stderr and "--store" in done.stderr
    assert run_vi("encode-videos", "--store", str(media["root"] / "x"), "--encoder", "nope", stdin="").returncode == 5
    assert run_vi("encode-videos", "--store", str(media["root"] / "x"), "--encoder", "efficientnet-lite0",
                  "--store-dtype", "int8", stdin="").returncode == 2


def test_after_a_kill_resume_gives_each_record_once_and_reuses_the_chunk_already_written(media, tmp_path):
    records, store = good_records(media), tmp_path / "store"
    config = ev.EncodeConfig(store=store, encoder=f"open_clip:{media['clip']}", chunk_size=3, device="cpu")
    fields = ev.Encoder(config)(records[:3])  # the kill: this chunk is on disk, only its first record went out
    written = fields[0]["features"]["file"]
    (store / f".{written}.999.tmp").write_bytes(b"half a chunk")  # a write the kill interrupted: never read
    output = tmp_path / "out.jsonl"
    output.write_text(json.dumps({**records[0], **fields[0]}) + "\n" + '{"id": "gre')  # and a torn line
    done = run_vi("encode-videos", "-i", str(write_jsonl(tmp_path / "in.jsonl", records)), "-o", str(output),
                  "--resume", "--store", str(store), "--encoder", f"open_clip:{media['clip']}",
                  "--chunk-size", "2", "-q")
    assert done.returncode == 0, done.stderr
    out = jsonl(output.read_text())
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in records)  # exactly once each
    assert {r["id"]: r["features"]["file"] for r in out if r["id"] in ("green", "red_again")} == {
        "green": written, "red_again": written}  # found in the store, not encoded again
    stored = []  # every id in every chunk: none was encoded twice
    for chunk in store.glob("chunk-*.safetensors"):
        with safe_open(str(chunk), "pt") as handle:
            stored += handle.keys()
    assert sorted(stored) == sorted(r["id"] for r in records)


def test_shards_fill_one_store_and_the_same_input_gives_bitwise_the_same_tensors(media, tmp_path):
    records = good_records(media)
    stores = []
    for run in ("a", "b"):
        stores.append(tmp_path / run)
        config = ev.EncodeConfig(store=stores[-1], encoder=f"open_clip:{media['clip']}", chunk_size=2, device="cpu")
        for index in range(3):  # three, where these five ids fall in every shard (of two, all in one)
            opts = StreamOptions(output=tmp_path / f"{run}{index}.jsonl", shard=Shard(index, 3), quiet=True)
            stage = Stage(ev.STAGE, writes=("features",), process_batch=ev.Encoder(config), batch_size=2)
            assert run_stage(stage, iter(records), opts).failed == 0
    outs = [[r["id"] for r in jsonl((tmp_path / f"a{i}.jsonl").read_text())] for i in range(3)]
    assert all(outs) and sorted(i for out in outs for i in out) == sorted(r["id"] for r in records) == sorted(FeatureStore(stores[0]).ids())
    a, b = FeatureStore(stores[0]), FeatureStore(stores[1])
    assert all(torch.equal(a.get(i, torch.float16), b.get(i, torch.float16)) for i in a.ids())


def test_efficientnet_lite0_tokens_are_its_last_feature_map_whose_mean_gives_its_logits(media):
    from vi.core.models import vision
    from vi.pipelines.common.frame_scorers import fit, to_tensor

    encoder = ve.load_video_encoder(resolve_video_encoder("efficientnet-lite0"), CPU)
    red = ve.encode_video(encoder, media["video"], 0, 3)
    green = ve.encode_video(encoder, media["video"], 3, 6)
    assert red.shape == (8, 49, 1280) and encoder.info["tokens_per_frame"] == 49 and encoder.info["dim"] == 1280
    assert ve.load_video_encoder_from_info(json.loads(json.dumps(encoder.info)), CPU) is encoder  # built once
    assert (red - green).abs().max() > 0.1
    classifier = vision.load_imagenet_classifier(vision.locate_imagenet_classifier(), CPU).model
    frame = ve.clip_frames(encoder, media["video"], 0, 3)[:1]
    with torch.no_grad():
        logits = classifier((fit(to_tensor(frame, CPU), (224, 224), "shortest") - 127.0) / 128.0)
        assert torch.allclose(classifier._fc(red[0].mean(0, keepdim=True)), logits, atol=1e-3, rtol=1e-3)


def test_a_videomae_encodes_the_clip_as_one_video_as_automodel_does(media):
    from decord import VideoReader
    from transformers import AutoImageProcessor, AutoModel

    encoder = ve.load_video_encoder(resolve_video_encoder(f"hf:{media['videomae']}"), CPU)
    tokens = encoder.encode([ve.clip_frames(encoder, media["video"], 0, 3)])[0]
    image = ve.encode_image(encoder, media["image"])
    frames = VideoReader(str(media["video"])).get_batch([round(t * 10) for t in sample_times(0, 3, 8)]).asnumpy()
    processor = AutoImageProcessor.from_pretrained(media["videomae"])
    with torch.no_grad():
        direct = AutoModel.from_pretrained(media["videomae"])(**processor([list(frames)], return_tensors="pt"))
    assert tokens.shape == (1, 64, 32) == image.shape and encoder.info["frames_out"] == 1
    assert torch.allclose(tokens, direct.last_hidden_state, atol=1e-4) and (tokens - image).abs().max() > 0.1
    with pytest.raises(ValueError, match="--frames 8"):
        resolve_video_encoder(f"hf:{media['videomae']}", frames=4)
    with pytest.raises(ModelNotAvailable, match="hf download no-such-org/no-such-video-model"):
        resolve_video_encoder("hf:no-such-org/no-such-video-model")


def test_a_clip_without_a_vit_image_tower_is_refused(tmp_path):
    import open_clip

    config = {"embed_dim": 32, "vision_cfg": {"image_size": 64, "layers": [1, 1, 1, 1], "width": 8},
              "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "open_clip_config.json").write_text(json.dumps({"model_cfg": config}))
    torch.save(open_clip.CLIP(**config).state_dict(), tmp_path / "repo" / "open_clip_pytorch_model.bin")
    with pytest.raises(SetupError, match="ModifiedResNet.*not a plain ViT"):
        ve.load_video_encoder(resolve_video_encoder(f"open_clip:{tmp_path / 'repo'}"), CPU)


def test_the_store_reads_the_latest_copy_of_an_id_across_stores_and_refuses_another_encoder(tmp_path):
    first = FeatureWriter(tmp_path / "s1", {"encoder": "e", "frames": 2}, "float32")
    old = first.write({"a": torch.zeros(2, 3), "b": torch.ones(2, 3)})
    os.utime(tmp_path / "s1" / old, (1, 1))  # written long ago
    new = first.write({"a": torch.full((2, 3), 7.0)})
    FeatureWriter(tmp_path / "s2", {"encoder": "e", "frames": 2}).write({"c": torch.arange(6.0).view(2, 3)})
    store = FeatureStore([tmp_path / "s1", tmp_path / "s2"])
    assert sorted(store.ids()) == ["a", "b", "c"] and store.missing(["a", "z"]) == ["z"] and "c" in store
    assert store.file("a").name == new and torch.equal(store.get("a"), torch.full((2, 3), 7.0))
    assert store.get("c").dtype == torch.float32 and torch.equal(store.get_many(["c"])[0], torch.arange(6.0).view(2, 3))
    with safe_open(str(tmp_path / "s1" / old), "pt") as chunk:
        assert json.loads(chunk.metadata()["ids"]) == ["a", "b"] and chunk.metadata()["encoder"] == "e"
    with pytest.raises(SetupError, match="frames=2.*frames=3"):
        FeatureWriter(tmp_path / "s1", {"encoder": "e", "frames": 3})
