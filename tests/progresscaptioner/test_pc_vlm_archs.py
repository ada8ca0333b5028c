"""vi caption-frames' transformers path on tiny random models of the three supported families (LLaVA-OneVision,
Qwen2-VL, Idefics3), built offline with their processors by the bench's builder and loaded through the real
loaders: T images in (not a video), a reply parsed or the record an error, batched greedy generation equal
to one-at-a-time, the retry and the batch fallback, auto's choice, and the bench helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from vi.core.devices import resolve_placement
from vi.core.errors import RecordError
from vi.core.models import sources, vlm, vlm_batch
from vi.evaluation.progresscaptioner.caption_bench import ARCHS, bench_caption_frames, build_tiny_vlm
from vi.pipelines.progresscaptioner import caption_frames as cf

CPU = resolve_placement("cpu", "float32")
IMAGE_TOKEN = {"qwen2_vl": "<|image_pad|>", "llava_onevision": "<image>", "idefics3": "<image>"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny_vlms")
    return {arch: str(build_tiny_vlm(arch, root / arch)) for arch in ARCHS}


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> list[str]:
    from PIL import Image

    out = tmp_path_factory.mktemp("frames")
    rng = np.random.default_rng(0)
    paths = []
    for i in range(4):
        path = out / f"f{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    return paths


def sequence(id_: str, paths: list[str], **extra) -> dict:
    return {"id": id_, "frames": [{"time": float(i), "path": p} for i, p in enumerate(paths)], **extra}


def config(folder: str, **options) -> cf.CaptionConfig:
    return cf.CaptionConfig(vlm=folder, device="cpu", dtype="float32", max_new_tokens=4, **options)


@pytest.mark.parametrize("arch", ARCHS)
def test_each_family_sees_t_images_and_its_reply_is_parsed_or_the_record_an_error(arch, tiny, frames):
    cfg = config(tiny[arch], batch_size=2)
    model = vlm.load_vlm(cfg.vlm_files, CPU)
    chat = vlm_batch.ImageChat(cf.messages_for(cfg, "slicing butter", 3), [np.zeros((90, 160, 3), np.uint8)] * 3)
    text = vlm_batch.chat_text(model, chat)
    assert text.count(IMAGE_TOKEN[arch]) == 3 and "<video>" not in text and "video_pad" not in text
    assert text.index(IMAGE_TOKEN[arch]) < text.index("These are 3 frames extracted from a video sequence depicting "
                                                      "slicing butter")
    out = cf.caption_batch([sequence("a", frames[:3], action="slicing butter"), sequence("b", frames[1:])], cfg)
    for result in out:  # random weights write random bytes: no <Frame i> lines, so asked again, then an error
        if isinstance(result, RecordError):
            assert result.kind == "frames_missing" and "also after one retry; raw reply: " in result.message
        else:
            assert result["captions"]["kind"] == "vlm" and len(result["captions"]["items"]) == 3
    if arch != "llava_onevision":
        return
    single = cf.caption_batch([sequence("c", frames[:2])], config(tiny[arch], window="1"))[0]
    assert not isinstance(single, RecordError)  # one image per request: a bare reply is the caption, noted
    assert [i["frame"] for i in single["captions"]["items"]] == [0, 1] and single["captions"]["window"] == 1
    assert all("no <Frame 1> header" in r for r in single["captions"]["repairs"])


def test_batched_greedy_generation_equals_one_at_a_time_with_left_padding(tiny):
    model = vlm.load_vlm(vlm.locate_vlm(tiny["llava_onevision"]), CPU)
    rng = np.random.default_rng(1)
    chats = [vlm_batch.ImageChat([{"role": "user", "content": "Describe each frame. " * k}],
                                 list(rng.integers(0, 256, (n, 90, 160, 3), dtype=np.uint8)))
             for k, n in [(1, 2), (3, 4), (2, 3)]]
    inputs = vlm_batch.batch_inputs(model, chats)
    assert (inputs["attention_mask"][:, 0] == 0).any() and (inputs["attention_mask"][:, -1] == 1).all()  # left pad
    one = vlm_batch.generate(model, chats, 12, batch_size=1)
    assert vlm_batch.generate(model, chats, 12, batch_size=3) == one and len(set(one)) > 1


def test_the_retry_samples_and_a_failed_batch_is_redone_one_at_a_time(tiny, frames, monkeypatch):
    calls = []

    def scripted(model, chats, max_new_tokens, temperature, seed):
        calls.append((len(chats), temperature))
        if len(chats) > 1 and len(calls) == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")
        if temperature == 0:
            return [["<Frame 1>: a\n<Frame 3>: c", "<Frame 1>: x\n<Frame 2-3>: y"][len(calls) - 2]]
        return ["Frame 1: a\nFrame 2: b\nFrame 3: c"]

    monkeypatch.setattr(vlm_batch, "_generate", scripted)
    cfg = config(tiny["qwen2_vl"], batch_size=2)
    first, second = cf.caption_batch([sequence("a", frames[:3]), sequence("b", frames[1:])], cfg)
    assert calls == [(2, 0.0), (1, 0.0), (1, 0.0), (1, 0.7)]  # the batch failed, then singly; one retry, sampled
    assert [i["text"] for i in first["captions"]["items"]] == ["a", "b", "c"]
    assert "no caption for <Frame 2>; asked again" in first["captions"]["repairs"][0]
    assert [i["text"] for i in second["captions"]["items"]] == ["x", "y", "y"]
    assert second["captions"]["repairs"] == ["reply: '<Frame 2-3>:' captions frames 2, 3 at once: each gets that text"]


def test_auto_takes_the_first_cached_vlm_else_the_offline_captioner(tiny, monkeypatch):
    cache = {vlm.KNOWN_VLMS[2]: Path(tiny["qwen2_vl"])}
    monkeypatch.setattr(vlm, "hub_snapshot", cache.get)
    monkeypatch.setattr(sources, "hub_snapshot", cache.get)  # what resolve_model asks
    found = cf.CaptionConfig(device="cpu")
    assert found.backend == "vlm" and found.model == vlm.KNOWN_VLMS[2] and found.kind == "vlm"
    cache.clear()
    offline = cf.CaptionConfig(device="cpu")
    assert offline.backend == "offline" and offline.kind == "offline-imagenet-labels"


def test_the_bench_reports_sequences_per_second_both_ways(tmp_path):
    result = bench_caption_frames("idefics3", sequences=2, frames=2, batch_size=2, max_new_tokens=2, repeats=1,
                                  work=tmp_path)
    assert result["same_replies"] and result["batched_seq_per_s"] > 0 and result["one_at_a_time_seq_per_s"] > 0
