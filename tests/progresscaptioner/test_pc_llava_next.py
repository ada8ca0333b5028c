"""ProgressCaptioner's released checkpoint format in vi: a LLaVA-NeXT folder (LlavaQwenForCausalLM, SigLIP,
mlp2x_gelu) converted to transformers' LlavaOnevisionForConditionalGeneration and run the release's way
(its prompt, 2x2 average pooling of every frame, no newline token). The golden is the release's own
vendored LLaVA-NeXT code (bpiyush/ProgCaptioner at c36e7b6) run outside the project on a tiny random
checkpoint in its own format (evaluation/progresscaptioner/llava_next_golden.py): the same logits for a
3-frame prompt and the same greedy reply. Then `vi caption-frames --vlm FOLDER` with batching and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import jsonl, run_vi
from PIL import Image

from vi.core.models import llava_next as ln

DATA = Path(__file__).parent / "data"
CHECKPOINT = DATA / "llava_next_tiny"
KNOWN_TOKENS = 303  # the release's tokenizer; the checkpoint stores 320 rows and the release cuts them


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return ln.convert(CHECKPOINT, tmp_path_factory.mktemp("llava_next") / "converted")


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(DATA / "llava_next_golden.pt", map_location="cpu", weights_only=True)


def _load(folder: Path):
    import transformers as tf

    model = tf.LlavaOnevisionForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).eval()
    tokenizer = tf.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    processor = tf.SiglipImageProcessor.from_pretrained(str(folder / "release_image_processor"), local_files_only=True)
    return model, tokenizer, processor


def test_the_converted_checkpoint_gives_the_releases_logits_and_greedy_reply(converted, golden):
    model, tokenizer, processor = _load(converted)
    assert ln.release_text(golden["query0"]) == golden["prompt"]  # infer.py's text, byte for byte
    frames = np.asarray(golden["frames"])
    assert torch.equal(processor(images=list(frames), return_tensors="pt")["pixel_values"], golden["pixel_values"])
    with torch.no_grad():
        embeds, mask = ln.release_inputs(model, tokenizer, processor, [(golden["query0"], frames)])
        logits = model(inputs_embeds=embeds, attention_mask=mask).logits[..., :KNOWN_TOKENS]
        reply = model.generate(inputs_embeds=embeds, attention_mask=mask, do_sample=False, max_new_tokens=12)
    assert embeds.shape[1] == int(golden["inputs_embeds_len"])  # 3 frames x 13 x 13 pooled tokens, no newline
    error = (logits - golden["logits"]).abs().max().item()
    print(f"logits: max abs difference {error:.1e} (up to {golden['logits'].abs().max():.1f})")
    assert error <= 1e-4
    assert reply[0].tolist() == list(golden["generated_ids"])
    # the frames matter: in the other order the last position's logits move
    with torch.no_grad():
        flipped, _ = ln.release_inputs(model, tokenizer, processor, [(golden["query0"], frames[::-1].copy())])
        moved = (model(inputs_embeds=flipped, attention_mask=mask).logits[0, -1, :KNOWN_TOKENS] - logits[0, -1]).abs().max()
    assert moved > 1e-2


def test_batched_release_requests_equal_one_at_a_time(converted, golden):
    model, tokenizer, processor = _load(converted)
    frames = np.asarray(golden["frames"])
    requests = [(golden["query0"], frames), ("Describe frame 1 and 2.", frames[:2].copy())]

    def reply(batch):
        embeds, mask = ln.release_inputs(model, tokenizer, processor, batch)
        with torch.no_grad():
            out = model.generate(inputs_embeds=embeds, attention_mask=mask, do_sample=False, max_new_tokens=6)
        return [row.tolist() for row in out]

    assert reply(requests) == [reply([r])[0] for r in requests]  # left-padded embeddings, masked


def test_an_unknown_key_or_projector_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'model.vision_resampler.x'"):
        ln.map_key("model.vision_resampler.x")
    folder = tmp_path / "ckpt"
    shutil.copytree(CHECKPOINT, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "mm_projector_type": "linear"}))
    with pytest.raises(ValueError, match="mlp2x_gelu"):
        ln.convert(folder, tmp_path / "out")


def test_vi_caption_frames_runs_the_release_checkpoint_with_batching_and_resume(tmp_path):
    rng = np.random.default_rng(0)
    records = []
    for n in range(3):
        paths = []
        for i in range(3):
            path = tmp_path / f"s{n}f{i}.jpg"
            Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(path)
            paths.append(str(path))
        records.append({"id": f"seq{n}", "action": "slicing butter",
                        "frames": [{"time": float(i), "path": p} for i, p in enumerate(paths)]})
    stdin = "".join(json.dumps(r) + "\n" for r in records[:2])
    env = {"VI_CACHE_DIR": str(tmp_path / "cache")}
    common = ("caption-frames", "--vlm", str(CHECKPOINT), "--device", "cpu", "--dtype", "float32", "--batch-size", "2",
              "--max-new-tokens", "8", "--missing", "keep", "-o", str(tmp_path / "out.jsonl"), "-q")
    first = run_vi(*common, stdin=stdin, env=env, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert list((tmp_path / "cache").rglob(ln.RELEASE_FILE))  # converted once, into vi's cache
    # a random model writes no "<Frame i>:" lines: the field is kept with every frame missing, not lost
    done = jsonl((tmp_path / "out.jsonl").read_text())
    assert [r["id"] for r in done] == ["seq0", "seq1"] and all("captions" in r for r in done)
    stdin = "".join(json.dumps(r) + "\n" for r in records)
    again = run_vi(*common, "--resume", stdin=stdin, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["id"] for r in jsonl((tmp_path / "out.jsonl").read_text())] == ["seq0", "seq1", "seq2"]
