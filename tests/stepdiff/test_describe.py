"""vi describe: the VLM path on a tiny randomly initialised Qwen2-VL with OWLv2 and Grounding DINO detectors
(all built here, offline, and loaded through the real loaders), the offline path with the real
EfficientNet-Lite0 on a clip of a real photo, clip errors, and the stage end to end on SmolLM2.

Qwen2-VL is the test VLM because every piece of its processor can be made from local parts: a byte-level BPE
tokenizer (256 byte tokens, no merges, plus Qwen's special tokens), its image and video processors with small
pixel budgets, and a chat template written here in the shape of Qwen2-VL's. Its processor takes videos, so the
8 frames go in as one video; the image path is checked by switching that off.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ffmpeg, jsonl, run_vi
from vi.core.devices import resolve_placement
from vi.core.errors import ModelNotAvailable, RecordError
from vi.core.models import sources, vlm
from vi.core.models.cache import load_counts
from vi.core.models.llm import ChatReply
from vi.pipelines.stepdiff import describe as ds

SMOL = "smollm2-135m"
CPU = resolve_placement("cpu", "float32")
ORANGE = Path("/usr/share/doc/opencv-doc/examples/data/orange.jpg")
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PAPER_SUMMARY = ("Summarize the captions into a single, descriptive sentence about what the person is doing, "
                 "and using what objects.")


def make_tiny_qwen2_vl(folder: Path) -> Path:
    """A random Qwen2-VL (about 80 k parameters) with a processor built from local parts."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(bytes_to_unicode().values())}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", additional_special_tokens=QWEN_SPECIAL[1:])
    ids = dict(zip(QWEN_SPECIAL, tokenizer.convert_tokens_to_ids(QWEN_SPECIAL)))
    budget = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}  # at most 16 patches, 4 tokens, per frame pair
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**budget), tokenizer=tokenizer,
                                 video_processor=Qwen2VLVideoProcessor(**budget), chat_template=QWEN_TEMPLATE)
    ends = {"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}
    config = Qwen2VLConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "max_position_embeddings": 512, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                     **ends},
        vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"], **ends)
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def make_tiny_owlv2(folder: Path) -> Path:
    """A random OWLv2 (about 70 k parameters) with a CLIP tokenizer of single bytes."""
    import torch
    from transformers import CLIPTokenizer, Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    chars = list(bytes_to_unicode().values())
    vocab = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=16)
    processor = Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 64, "width": 64}),
                               tokenizer=tokenizer)
    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    config = Owlv2Config(text_config={**small, "vocab_size": len(vocab), "max_position_embeddings": 16,
                                      "bos_token_id": len(vocab) - 2, "eos_token_id": len(vocab) - 1},
                         vision_config={**small, "image_size": 64, "patch_size": 16}, projection_dim=32)
    torch.manual_seed(0)
    model = Owlv2ForObjectDetection(config)
    # A random shift and scale put every logit near 56 (probability 1.0 for every name); a trained head
    # scales the box-query cosine, which spreads the probabilities around 0.5 as here.
    with torch.no_grad():
        head = model.class_head
        head.logit_shift.weight.zero_(), head.logit_shift.bias.zero_()
        head.logit_scale.weight.zero_(), head.logit_scale.bias.fill_(3.0)  # elu(3) + 1 = 4
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def make_tiny_grounding_dino(folder: Path) -> Path:
    """A random Grounding DINO (about 160 k parameters: tiny Swin, tiny BERT) with a word-piece vocabulary."""
    import torch
    from transformers import (
        BertConfig,
        BertTokenizer,
        GroundingDinoConfig,
        GroundingDinoForObjectDetection,
        GroundingDinoImageProcessor,
        GroundingDinoProcessor,
        SwinConfig,
    )

    folder.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "knife", "red", "tomato", "board"]
    (folder / "vocab.txt").write_text("\n".join(words + list(letters) + [f"##{c}" for c in letters]) + "\n")
    processor = GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}),
        tokenizer=BertTokenizer(str(folder / "vocab.txt")))
    config = GroundingDinoConfig(
        backbone_config=SwinConfig(image_size=64, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1],
                                   num_heads=[1, 1, 1, 1], window_size=2,
                                   out_features=["stage2", "stage3", "stage4"]),
        text_config=BertConfig(vocab_size=len(words) + 52, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32),
        num_queries=10, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=32, decoder_ffn_dim=32,
        encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, encoder_n_points=1,
        decoder_n_points=1, max_text_len=32)
    torch.manual_seed(0)
    GroundingDinoForObjectDetection(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_models")
    return {"vlm": make_tiny_qwen2_vl(root / "qwen2-vl"), "owlv2": make_tiny_owlv2(root / "owlv2"),
            "dino": make_tiny_grounding_dino(root / "grounding-dino")}


@pytest.fixture(scope="module")
def test_video(tmp_path_factory) -> Path:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (make install installs it)")
    path = tmp_path_factory.mktemp("video") / "pattern.mp4"  # 6 s at 10 fps, a moving test pattern
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=160x90:rate=10", "-t", "6", "-pix_fmt", "yuv420p", str(path))
    return path


@pytest.fixture(scope="module")
def orange_video(tmp_path_factory) -> Path:
    if not ORANGE.exists():
        pytest.skip(f"{ORANGE} is absent: install the Debian package opencv-doc (make install does)")
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (make install installs it)")
    path = tmp_path_factory.mktemp("orange") / "orange.mp4"
    ffmpeg("-loop", "1", "-i", str(ORANGE), "-t", "4", "-r", "5", "-vf", "scale=320:-2,format=yuv420p", str(path))
    return path


class FakeLLM:
    """Stands in for the consolidating LLM: records what it is asked, answers one fixed sentence."""

    n_ctx = 2048

    def __init__(self, reply: str = "The person peels an orange with their hands."):
        self.reply, self.asked = reply, []

    def count_message_tokens(self, messages) -> int:
        return sum(len(m["content"]) // 4 + 8 for m in messages)

    def chat(self, messages, schema=None, max_tokens=0, temperature=0.0, seed=0):
        self.asked.append(messages)
        return ChatReply(self.reply, 0, 0, "stop")


@pytest.fixture()
def fake_llm(monkeypatch) -> FakeLLM:
    llm = FakeLLM()
    monkeypatch.setattr(ds.DescribeConfig, "load_llm", lambda self: llm)
    return llm


def clip(video: Path, start: float, end: float, **extra) -> dict:
    return {"id": f"{video.stem}_{start}_{end}", "video": str(video), "start": start, "end": end, **extra}


# --- pure pieces ----------------------------------------------------------------------------------

def test_frames_are_sampled_at_the_centres_of_equal_parts_of_the_clip():
    assert ds.sample_times(2.0, 6.0, 8) == [2.25, 2.75, 3.25, 3.75, 4.25, 4.75, 5.25, 5.75]
    assert ds.sample_times(0.0, 1.0, 1) == [0.5]


@pytest.mark.parametrize("text, expected", [
    ("- Knife: silver, sharp\n- Cutting board: wooden\n", [("Knife", "silver, sharp"), ("Cutting board", "wooden")]),
    ("1. red tomato (sliced)\n2) bowl - glass.\n\n", [("red tomato", "sliced"), ("bowl", "glass")]),
    ("Objects:\n* **Spatula**, black plastic\n* spatula\n* T-shirt", [("Spatula", "black plastic"), ("T-shirt", None)]),
])
def test_object_lists_parse_into_names_and_attributes(text, expected):
    assert [(o["name"], o["attributes"]) for o in ds.parse_object_list(text)] == expected


# --- the VLM and the detectors, through the real loaders -----------------------------------------------

def test_the_tiny_vlm_takes_the_frames_as_one_video_or_as_images_and_writes_text(tiny, monkeypatch):
    model = vlm.load_vlm(vlm.locate_vlm(str(tiny["vlm"])), CPU)
    frames = np.random.default_rng(0).integers(0, 256, (8, 90, 160, 3), dtype=np.uint8)
    assert model.takes_video
    video = model.inputs(ds.ACTION_PROMPT, frames, span_s=4.0)
    assert "pixel_values" not in video and video["video_grid_thw"].tolist()[0][0] == 4  # 8 frames, 2 per patch
    caption = model.caption(ds.ACTION_PROMPT, frames, max_new_tokens=6, span_s=4.0)
    assert isinstance(caption, str) and caption == model.caption(ds.ACTION_PROMPT, frames, 6, span_s=4.0)
    monkeypatch.setattr(model, "takes_video", False)  # a processor without a video processor
    images = model.inputs(ds.ACTION_PROMPT, frames, span_s=4.0)
    assert "pixel_values_videos" not in images and len(images["image_grid_thw"]) == 8
    assert isinstance(model.caption(ds.OBJECTS_PROMPT, frames[:1], max_new_tokens=6), str)


def test_detector_scores_are_the_best_box_probability_of_each_name(tiny):
    import torch

    detector = vlm.load_detector(vlm.locate_detector(str(tiny["owlv2"])), CPU)
    assert detector.default_box_threshold == pytest.approx(0.1)  # OWLv2's own post-processing default
    image = np.random.default_rng(1).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    names = ["knife", "red tomato", "cutting board", "bowl", "wooden spoon", "frying pan"]
    scores = detector.best_scores(image, names)
    assert len(scores) == 6 and all(0 < s < 1 for s in scores) and len(set(scores)) == 6
    inputs = detector.processor(text=[names], images=image, return_tensors="pt")
    with torch.inference_mode():
        outputs = detector.model(**inputs)
    boxes = detector.processor.post_process_grounded_object_detection(outputs, threshold=0.0)[0]
    assert max(scores) == pytest.approx(float(boxes["scores"].max()), abs=1e-6)  # the transformers way agrees


def test_objects_are_kept_where_the_detector_scores_them_above_the_thresholds(tiny):
    detector = vlm.load_detector(vlm.locate_detector(str(tiny["owlv2"])), CPU)
    image = np.random.default_rng(1).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    objects = [{"name": n, "attributes": None} for n in ["knife", "red tomato", "cutting board", "bowl",
                                                          "wooden spoon", "frying pan"]]
    p = detector.best_scores(image, [o["name"] for o in objects])
    ranked = sorted(p)
    kept = ds.ground_objects(detector, image, objects, min_score=ranked[2], box_threshold=0.0)
    assert [o["name"] for o in kept] == [o["name"] for o, s in zip(objects, p) if s > ranked[2]]
    assert len(kept) == 3 and [o["score"] for o in kept] == [round(s, 4) for s in p if s > ranked[2]]
    by_box = ds.ground_objects(detector, image, objects, min_score=0.0, box_threshold=ranked[4])
    assert sorted(o["score"] for o in by_box) == [round(ranked[4], 4), round(ranked[5], 4)]
    assert ds.ground_objects(detector, image, objects, min_score=0.0, box_threshold=1.0) == []


def test_grounding_dino_scores_each_name_by_its_own_tokens(tiny):
    detector = vlm.load_detector(vlm.locate_detector(str(tiny["dino"])), CPU)
    assert detector.default_box_threshold == pytest.approx(0.25)
    tokenizer = detector.processor.tokenizer
    names = ["Knife", "red tomato", "cutting board", "a.b"]
    (text, ids, spans), = vlm.phrase_groups(tokenizer, names, max_tokens=32)
    assert text == "knife. red tomato. cutting board. a b."
    assert [tokenizer.decode([ids[i] for i in span]) for span in spans] == ["knife", "red tomato", "cutting board",
                                                                           "a b"]
    assert len(vlm.phrase_groups(tokenizer, names, max_tokens=12)) > 1  # a long list is cut into captions
    image = np.random.default_rng(1).integers(0, 256, (90, 160, 3), dtype=np.uint8)
    scores = detector.best_scores(image, names)
    assert len(scores) == 4 and all(0 < s < 1 for s in scores) and len(set(scores)) > 1


def test_describe_with_a_vlm_and_a_detector_samples_8_frames_inside_the_clip(tiny, test_video, fake_llm,
                                                                               monkeypatch):
    asked: list[list[float]] = []
    read_frames = ds.media.read_frames

    def spy(path, times, *args, **kwargs):
        asked.append(list(times))
        return read_frames(path, times, *args, **kwargs)

    monkeypatch.setattr(ds.media, "read_frames", spy)
    config = ds.DescribeConfig(vlm=str(tiny["vlm"]), detector=str(tiny["owlv2"]), llm=SMOL,
                               max_new_tokens=24, box_threshold=0.0, min_score=0.5, device="cpu")
    record = clip(test_video, 1.0, 5.0, narration="Now  we cut the tomato.")
    out = ds.describe(record, config)["description"]
    assert asked == [[1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.25, 4.75, 3.0]]  # 8 frames, then the centre
    assert out["sources"] == {"action": str(tiny["vlm"]), "objects": f"{tiny['vlm']}+{tiny['owlv2']}",
                              "step": SMOL}
    assert out["narration"] == "Now we cut the tomato." and out["step"] == fake_llm.reply
    model, detector = config.load_vlm(), config.load_detector()
    frames = read_frames(test_video, asked[0])
    assert out["action"] == (model.caption(ds.ACTION_PROMPT, frames[:8], 24, span_s=4.0) or None)
    listed = ds.parse_object_list(model.caption(ds.OBJECTS_PROMPT, frames[8:], 24))
    assert listed  # random weights, fixed seed: the model lists something for the detector to check
    assert out["objects"] == ds.ground_objects(detector, frames[8], listed, 0.5, 0.0)
    assert all(o["score"] > 0.5 for o in out["objects"])
    user = fake_llm.asked[0][-1]["content"]
    assert user.startswith("Video narration: Now we cut the tomato. Possible activity: ") and PAPER_SUMMARY in user
    ds.describe(record, config)
    assert load_counts[("vlm", config.vlm_files, config.placement)] == 1  # loaded once for both records


def test_auto_uses_cached_models_and_falls_back_to_imagenet_labels(tiny, monkeypatch, caplog):
    cache = {vlm.KNOWN_VLMS[1]: tiny["vlm"], vlm.KNOWN_DETECTORS[1]: tiny["owlv2"]}
    monkeypatch.setattr(vlm, "hub_snapshot", cache.get)
    monkeypatch.setattr(sources, "hub_snapshot", cache.get)  # what resolve_model asks
    config = ds.DescribeConfig(llm=SMOL, device="cpu")
    assert config.sources == {"action": vlm.KNOWN_VLMS[1], "objects": f"{vlm.KNOWN_VLMS[1]}+{vlm.KNOWN_DETECTORS[1]}",
                              "step": SMOL}
    cache.clear()
    caplog.set_level("INFO", logger="vi")
    offline = ds.DescribeConfig(llm=SMOL, device="cpu")
    assert offline.vlm_files is None and offline.detector_files is None
    assert offline.sources == {"action": None, "objects": "imagenet-labels:efficientnet-lite0", "step": SMOL}
    assert f"hf download {vlm.KNOWN_VLMS[0]}" in caplog.text
    with pytest.raises(ModelNotAvailable, match=re.escape(f"hf download {vlm.KNOWN_VLMS[0]}")):
        ds.DescribeConfig(detector=str(tiny["owlv2"]), llm=SMOL, device="cpu")


def test_models_of_the_wrong_kind_are_refused_before_any_record(tiny, tmp_path):
    with pytest.raises(ModelNotAvailable, match="'owlv2' model"):
        vlm.locate_vlm(str(tiny["owlv2"]))
    with pytest.raises(ModelNotAvailable, match="'qwen2_vl' model"):
        vlm.locate_detector(str(tiny["vlm"]))
    no_template = tmp_path / "no-template"
    shutil.copytree(tiny["vlm"], no_template)
    (no_template / "chat_template.jinja").unlink()
    with pytest.raises(ModelNotAvailable, match="no chat template"):
        vlm.locate_vlm(str(no_template))
    with pytest.raises(ValueError, match="with --vlm none the objects are ImageNet labels"):
        ds.DescribeConfig(vlm="none", detector=str(tiny["owlv2"]), llm=SMOL, device="cpu")


# --- the offline path: EfficientNet-Lite0 on a real photo --------------------------------------------

def test_offline_objects_are_imagenet_labels_of_the_centre_frame(orange_video, fake_llm):
    config = ds.DescribeConfig(vlm="none", llm=SMOL, device="cpu")
    out = ds.describe(clip(orange_video, 0.5, 3.5, narration="Now peel the orange."), config)["description"]
    assert out["action"] is None and out["narration"] == "Now peel the orange."
    names, scores = [o["name"] for o in out["objects"]], [o["score"] for o in out["objects"]]
    assert names[0] == "orange" and len(names) == 5 and scores == sorted(scores, reverse=True)
    assert 0.5 < scores[0] <= 1 and sum(scores) <= 1 + 1e-3
    assert out["sources"] == {"action": None, "objects": "imagenet-labels:efficientnet-lite0", "step": SMOL}
    system, user = (m["content"] for m in fake_llm.asked[0])
    assert system == ("You are an AI assistant that synthesizes the output of narration, action and object "
                      "captioning models into a single description of the content.")
    assert user.startswith("Video narration: Now peel the orange. Possible activity: (not available). "
                           "Possible objects: orange (") and user.endswith(f". {PAPER_SUMMARY}")


def test_without_narration_the_description_comes_from_what_there_is(orange_video, fake_llm):
    config = ds.DescribeConfig(vlm="none", llm=SMOL, device="cpu")
    out = ds.describe(clip(orange_video, 1.0, 2.0), config)["description"]
    assert out["narration"] is None and out["step"] == fake_llm.reply
    assert fake_llm.asked[0][-1]["content"].startswith(
        "Video narration: (not available). Possible activity: (not available). Possible objects: orange (")
    strict = ds.DescribeConfig(vlm="none", llm=SMOL, device="cpu", min_score=0.999)
    with pytest.raises(RecordError) as info:
        ds.describe(clip(orange_video, 1.0, 2.0), strict)
    assert info.value.kind == "nothing_to_describe" and len(fake_llm.asked) == 1


def test_clips_without_a_usable_video_or_with_times_outside_it_are_record_errors(orange_video, tmp_path):
    config = ds.DescribeConfig(vlm="none", llm=SMOL, device="cpu")
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"this is not a video" * 100)
    cases = [({"id": "a", "start": 0, "end": 1}, "missing_field", "no 'video' path"),
             (clip(tmp_path / "gone.mp4", 0, 1), "missing_media", "gone.mp4: no such file"),
             (clip(garbage, 0, 1), "unreadable_media", "garbage.mp4"),
             (clip(orange_video, 3.0, 9.0), "clip_outside_video", "'end' is 9.0 s"),
             (clip(orange_video, 5.0, 9.0), "clip_outside_video", "'start' is 5.0 s"),
             (clip(orange_video, 2.0, 1.0), "bad_interval", "'start' 2.0 s must be >= 0 and before 'end'"),
             ({"id": "b", "video": str(orange_video), "end": 1.0}, "missing_field", "'start' is None")]
    for record, kind, message in cases:
        with pytest.raises(RecordError) as info:
            ds.describe(record, config)
        assert info.value.kind == kind and message in info.value.message, (record, info.value.message)
    inside = clip(orange_video, 3.0, 4.3)  # within the 0.5 s tolerance: frames from inside the video
    assert ds.clip_span(inside, config.lengths)[2] == pytest.approx(4.0)


# --- the stage ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args, code, message", [
    (["--vlm", "nobody-vi-test/no-such-vlm"], 5, "hf download nobody-vi-test/no-such-vlm"),
    (["--vlm", "none", "--llm", "no-such-llm"], 5, "no-such-llm"),
    (["--vlm", "none", "--detector", "google/owlv2-base-patch16-ensemble"], 2, "--detector"),
])
def test_a_missing_model_or_a_bad_option_stops_the_stage_before_any_record(args, code, message):
    done = run_vi("describe", *args, stdin='{"id": "a", "video": "x.mp4", "start": 0, "end": 1}\n')
    assert done.returncode == code and done.stdout == "" and message in done.stderr, done.stderr


@pytest.mark.slow
def test_describe_end_to_end_on_smollm2_keeps_the_record_contract(orange_video, tmp_path):
    upstream = {"id": "up", "errors": [{"stage": "clips", "kind": "x", "message": "y"}]}
    records = [clip(orange_video, 0.5, 3.5, narration="Peel the orange.", keystep="peel orange"),
               clip(tmp_path / "gone.mp4", 0, 1), upstream]
    src = tmp_path / "clips.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_vi("describe", "--vlm", "none", "--llm", SMOL, "--device", "cpu", "-i", str(src), "-q")
    assert done.returncode == 3, done.stderr  # one clip failed, the others are out
    good, gone, passed = jsonl(done.stdout)
    assert list(good)[:len(records[0])] == list(records[0])  # its own fields kept, in order, first
    description = good["description"]
    assert isinstance(description["step"], str) and description["step"].strip()
    assert description["sources"] == {"action": None, "objects": "imagenet-labels:efficientnet-lite0",
                                      "step": SMOL}
    assert description["objects"][0]["name"] == "orange" and description["narration"] == "Peel the orange."
    assert gone["errors"][-1]["kind"] == "missing_media" and "description" not in gone
    assert passed == upstream
