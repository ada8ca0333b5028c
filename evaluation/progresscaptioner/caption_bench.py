"""`make bench`, caption-frames: sequences per second batched vs one sequence at a time, on a tiny VLM.

No VLM weights are on these machines, so the benchmark (and the tests of every VLM path) runs the real
transformers classes of the three supported families on tiny random configs built here, offline, with
processors made from local parts: a byte-level BPE tokenizer (256 byte tokens, no merges, plus the family's
special tokens), small image budgets, and a chat template in the shape of the family's own:
- `qwen2_vl`: Qwen2VLForConditionalGeneration (Qwen2-VL / Qwen2.5-VL's processor family);
- `llava_onevision`: LlavaOnevisionForConditionalGeneration (the paper's base model; anyres tiles);
- `idefics3`: Idefics3ForConditionalGeneration (SmolVLM's family; image splitting into tiles).

The bench captions the same sequences with `vi caption-frames`' transformers path (`vlm_batch.generate`),
one sequence per generate call (what ProgressCaptioner's inference script does) and `batch_size` per call
(left padding), greedy, and reports sequences per second of each and their ratio. The outputs of the two are
compared too: batched greedy decoding must give the same text.
"""

from __future__ import annotations

from pathlib import Path

ARCHS = ("qwen2_vl", "llava_onevision", "idefics3")
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
_PARTS = ("{% if message['content'] is string %}{{ message['content'] }}{% else %}"
          "{% for part in message['content'] %}{% if part['type'] == 'image' %}IMAGE"
          "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}")
IM_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n" + _PARTS +
               "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEMPLATES = {
    "qwen2_vl": IM_TEMPLATE.replace("IMAGE", "<|vision_start|><|image_pad|><|vision_end|>"),
    "llava_onevision": IM_TEMPLATE.replace("IMAGE", "<image>\n"),
    "idefics3": ("<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}:"
                 + _PARTS.replace("IMAGE", "<image>") + "<end_of_utterance>\n{% endfor %}"
                 "{% if add_generation_prompt %}Assistant:{% endif %}"),
}
SPECIAL = {
    "qwen2_vl": QWEN_SPECIAL,
    "llava_onevision": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
    "idefics3": ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>",
                 "<global-img>"],
}
TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 4096}


def _tokenizer(arch: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(bytes_to_unicode().values())}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = SPECIAL[arch]
    end = "<end_of_utterance>" if arch == "idefics3" else "<|im_end|>"
    extra = [t for t in special if t not in ("<|endoftext|>", end)]
    tokenizer = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token=end,
                                   pad_token="<|endoftext|>", additional_special_tokens=extra)
    ids = dict(zip(special, tokenizer.convert_tokens_to_ids(special)))
    return tokenizer, ids, {"eos_token_id": ids[end], "pad_token_id": ids["<|endoftext|>"]}


def build_tiny_vlm(arch: str, folder: Path, seed: int = 0) -> Path:
    """A random VLM of `arch` (ARCHS; tens of thousands of parameters) with its processor, saved to `folder`."""
    import torch
    import transformers as tf

    tokenizer, ids, ends = _tokenizer(arch)
    vocab = len(tokenizer)
    if arch == "qwen2_vl":
        budget = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}
        processor = tf.Qwen2VLProcessor(image_processor=tf.Qwen2VLImageProcessor(**budget), tokenizer=tokenizer,
                                        video_processor=tf.Qwen2VLVideoProcessor(**budget),
                                        chat_template=TEMPLATES[arch])
        config = tf.Qwen2VLConfig(
            text_config={**TEXT, "vocab_size": vocab, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
                         **ends},
            vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2},
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"], **ends)
        cls = tf.Qwen2VLForConditionalGeneration
    elif arch == "llava_onevision":
        pinpoints = [[28, 28], [28, 56], [56, 28], [56, 56]]
        image_processor = tf.LlavaOnevisionImageProcessor(size={"height": 28, "width": 28},
                                                          image_grid_pinpoints=pinpoints)
        processor = tf.LlavaOnevisionProcessor(
            image_processor=image_processor, tokenizer=tokenizer,
            video_processor=tf.LlavaOnevisionVideoProcessor(size={"height": 28, "width": 28}),
            num_image_tokens=4, vision_feature_select_strategy="full", chat_template=TEMPLATES[arch])
        config = tf.LlavaOnevisionConfig(
            vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                           "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
            text_config={"model_type": "qwen2", **TEXT, "vocab_size": vocab, **ends},
            image_token_index=ids["<image>"], video_token_index=ids["<video>"], image_grid_pinpoints=pinpoints,
            vision_feature_select_strategy="full", vision_feature_layer=-1, **ends)
        cls = tf.LlavaOnevisionForConditionalGeneration
    elif arch == "idefics3":
        image_processor = tf.Idefics3ImageProcessor(size={"longest_edge": 56}, max_image_size={"longest_edge": 28})
        processor = tf.Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=1,
                                         chat_template=TEMPLATES[arch])
        config = tf.Idefics3Config(
            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
            text_config={"model_type": "llama", **TEXT, "vocab_size": vocab, **ends},
            image_token_id=ids["<image>"], scale_factor=2, **ends)
        cls = tf.Idefics3ForConditionalGeneration
    else:
        raise ValueError(f"unknown tiny VLM architecture {arch!r}; one of {', '.join(ARCHS)}")
    torch.manual_seed(seed)
    cls(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def bench_caption_frames(arch: str = "qwen2_vl", sequences: int = 16, frames: int = 4, batch_size: int = 8,
                         max_new_tokens: int = 32, repeats: int = 2, device: str = "cpu",
                         work: Path | None = None) -> dict:
    """Sequences per second captioning `sequences` sequences of `frames` random 160x90 frames with a tiny
    `arch`: one sequence per generate call vs `batch_size` per call, each the best of `repeats` runs after
    an untimed warm-up; and whether both gave the same replies (greedy decoding must)."""
    import tempfile
    import time

    import numpy as np
    from vi.core.devices import resolve_placement
    from vi.core.models import vlm, vlm_batch
    from vi.core.models.resolve import resolve
    from vi.pipelines.common.chat_prompt import load_prompt

    with tempfile.TemporaryDirectory(dir=work) as tmp:
        folder = build_tiny_vlm(arch, Path(tmp) / arch)
        placement = resolve_placement(device, "float32", engine="torch")
        model = vlm.load_vlm(resolve(folder, "vlm"), placement)
        template = load_prompt("progress_caption_no_action", None, ("n_frames", "frame_lines"))
        lines = "\n".join(f"<Frame {i}>: Your description" for i in range(1, frames + 1))
        messages = template.render(n_frames=str(frames), frame_lines=lines)
        rng = np.random.default_rng(0)
        chats = [vlm_batch.ImageChat(messages, list(rng.integers(0, 256, (frames, 90, 160, 3), dtype=np.uint8)))
                 for _ in range(sequences)]
        results: dict[int, tuple[float, list[str]]] = {}
        for size in (1, batch_size):
            vlm_batch.generate(model, chats[:size], max_new_tokens, batch_size=size)  # warm-up
            best, replies = float("inf"), []
            for _ in range(repeats):
                start = time.perf_counter()
                replies = vlm_batch.generate(model, chats, max_new_tokens, batch_size=size)
                best = min(best, time.perf_counter() - start)
            results[size] = (best, replies)
    one_s, batched_s = results[1][0], results[batch_size][0]
    return {"arch": arch, "device": str(placement.device), "sequences": sequences, "frames": frames,
            "max_new_tokens": max_new_tokens, "batch_size": batch_size,
            "one_at_a_time_seq_per_s": round(sequences / one_s, 2),
            "batched_seq_per_s": round(sequences / batched_s, 2),
            "speedup": round(one_s / batched_s, 2), "same_replies": results[1][1] == results[batch_size][1]}


def caption_bench_rows(result: dict) -> list:
    """make bench's rows: batched vs one sequence per generate call (the official inference script's way)."""
    from vi.evaluation.bench.tools import Row

    one, batched = 1 / result["one_at_a_time_seq_per_s"], 1 / result["batched_seq_per_s"]
    return [Row(f"caption-frames batched x{result['batch_size']} ({result['arch']}, {result['device']})", batched,
                one, "s", None, f"s/sequence of {result['frames']} frames, tiny random {result['arch']}, "
                f"{result['max_new_tokens']} new tokens; baseline one sequence per call; same replies: "
                f"{result['same_replies']}")]


if __name__ == "__main__":
    import json
    import sys

    # python -m vi.evaluation.progresscaptioner.caption_bench [ARCH ...]     the bench
    # python -m vi.evaluation.progresscaptioner.caption_bench tiny ARCH DIR  a tiny random VLM (the recipe's base)
    if sys.argv[1:2] == ["tiny"] and len(sys.argv) == 4:
        print(build_tiny_vlm(sys.argv[2], Path(sys.argv[3])))
    else:
        for name in sys.argv[1:] or ["qwen2_vl"]:
            print(json.dumps(bench_caption_frames(name)))
