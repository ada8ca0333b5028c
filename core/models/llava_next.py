"""LLaVA-NeXT-format checkpoints (ProgressCaptioner's release: a LLaVA-OneVision-7B fine-tune saved by
LLaVA-NeXT's own code, `LlavaQwenForCausalLM`) as transformers' `LlavaOnevisionForConditionalGeneration`,
and the way the release feeds it frames.

`convert(src, dst)` writes a transformers folder: config, weights and processor mapped from the
LLaVA-NeXT folder (the map below), plus `vi_release.json`, which makes vi run the release's own video
path (`release_inputs`) instead of transformers' video preprocessing. `converted(src)` does it once
into vi's cache and returns the folder.

Where the two differ, and what vi does (the release's infer.py at c36e7b6 with its vendored LLaVA-NeXT):
- frames: SigLIP's processor (resize to the tower's size, scale, normalise with 0.5/0.5), every frame
  through the tower (its last layer dropped: the release deletes it), the 2-layer GELU projector, then
  per frame a 2x2 **average** pool over the patch grid (`get_2dPool` is called with its default stride 2:
  infer.py's `--mm_spatial_pool_stride 4` never reaches it), frames one after the other, **no newline
  token** (`--mm_newline_position no_token`). transformers' video path pools bilinearly to ceil(h/2) (13 vs
  14 per side on the 27x27 grid) and appends `image_newline`;
- text: conv mode `qwen_1_5` (ChatML, system "You are a helpful assistant."), `<image>\\n` before the
  query, the frames' features spliced where `<image>` is; greedy decoding.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

RELEASE_FILE = "vi_release.json"
SYSTEM = "You are a helpful assistant."  # LLaVA-NeXT's conv_qwen ("qwen_1_5")
IMAGE = "<image>"
# SigLIP so400m/14 at 384 px, the tower of LLaVA-OneVision (its config is on the hub, not in the
# checkpoint; LLaVA-NeXT's own SigLIP class carries these defaults)
SO400M = {"hidden_size": 1152, "intermediate_size": 4304, "num_attention_heads": 16, "image_size": 384,
          "patch_size": 14, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh"}
# LLaVA-NeXT name -> transformers' (the on-disk layout LlavaOnevisionForConditionalGeneration loads)
KEY_MAP = (
    (r"model\.embed_tokens\.", "language_model.model.embed_tokens."),
    (r"model\.layers\.", "language_model.model.layers."),
    (r"model\.norm\.", "language_model.model.norm."),
    (r"lm_head\.", "language_model.lm_head."),
    (r"model\.mm_projector\.0\.", "multi_modal_projector.linear_1."),
    (r"model\.mm_projector\.2\.", "multi_modal_projector.linear_2."),
    (r"model\.image_newline$", "image_newline"),
    (r"model\.vision_tower\.vision_tower\.vision_model\.", "vision_tower.vision_model."),
)


def is_llava_next(folder: Path) -> bool:
    config = Path(folder) / "config.json"
    if not config.is_file():
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    return "mm_projector_type" in data and "mm_vision_tower" in data


def map_key(key: str) -> str:
    for pattern, replacement in KEY_MAP:
        if re.match(pattern, key):
            return re.sub(pattern, replacement, key, count=1)
    raise ValueError(f"LLaVA-NeXT checkpoint: unknown key {key!r} (vi converts Qwen2 + SigLIP + mlp2x_gelu "
                     "LLaVA-OneVision checkpoints)")


def _read_weights(folder: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    state: dict = {}
    if files:
        for file in files:
            state.update(load_file(str(file)))
        return state
    for file in sorted(folder.glob("pytorch_model*.bin")):
        state.update(torch.load(file, map_location="cpu", weights_only=True, mmap=True))
    if not state:
        raise ValueError(f"{folder}: no *.safetensors or pytorch_model*.bin weights")
    return state


def _vision_config(source: dict, folder: Path, weights: dict) -> dict:
    """The tower's config: its folder's config.json when `mm_vision_tower` is a local folder, the so400m
    facts for google/siglip-so400m-patch14-384; the layer count from the weights (the release drops the
    last layer before saving)."""
    name = str(source["mm_vision_tower"])
    local = (folder / name) if not Path(name).is_absolute() else Path(name)
    if (local / "config.json").is_file():
        data = json.loads((local / "config.json").read_text(encoding="utf-8"))
        base = data.get("vision_config", data)
    elif "siglip-so400m-patch14-384" in name:
        base = dict(SO400M)
    else:
        raise ValueError(f"mm_vision_tower {name!r}: vi knows google/siglip-so400m-patch14-384 or a local SigLIP "
                         "folder with its config.json")
    prefix = "vision_tower.vision_model.encoder.layers."  # (mapped names)
    layers = len({k[len(prefix):].split(".")[0] for k in weights if k.startswith(prefix)})
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "image_size", "patch_size", "layer_norm_eps",
            "hidden_act", "num_channels", "attention_dropout")
    return {**{k: base[k] for k in keep if k in base}, "model_type": "siglip_vision_model",
            "num_hidden_layers": layers, "vision_use_head": False}


def convert(src: Path, dst: Path) -> Path:
    """A LLaVA-NeXT folder -> a transformers LlavaOnevision folder (written whole, then renamed)."""
    import torch
    import transformers as tf
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    source = json.loads((src / "config.json").read_text(encoding="utf-8"))
    if source.get("mm_projector_type") != "mlp2x_gelu":
        raise ValueError(f"{src}: mm_projector_type {source.get('mm_projector_type')!r}; vi converts mlp2x_gelu "
                         "(LLaVA-OneVision's)")
    weights = {map_key(k): v.float() if v.is_floating_point() else v for k, v in _read_weights(src).items()}
    tokenizer = tf.AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    # The release's loader resizes the embeddings to the tokenizer (OneVision stores 152064 rows for 151646
    # tokens): the rows past it are never produced. Then transformers' own path needs rows for <image> and
    # <video>; they are added, and never generated (suppress_tokens).
    known = len(tokenizer)
    added = [t for t in (IMAGE, "<video>") if t not in tokenizer.get_vocab()]
    tokenizer.add_special_tokens({"additional_special_tokens": added}, replace_additional_special_tokens=False)
    for key in ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight"):
        if key in weights:
            kept = weights[key][:known]
            weights[key] = torch.cat([kept, kept.mean(0, keepdim=True).expand(len(tokenizer) - known, -1)])
    text_fields = {k: v for k, v in source.items() if not k.startswith(("mm_", "image_", "architectures", "auto_map"))}
    text_fields.update(model_type="qwen2", vocab_size=len(tokenizer), torch_dtype="float32")
    ends = {"eos_token_id": source.get("eos_token_id"), "pad_token_id": tokenizer.pad_token_id}
    vision = _vision_config(source, src, weights)
    config = tf.LlavaOnevisionConfig(
        text_config=text_fields, vision_config=vision, image_token_index=tokenizer.convert_tokens_to_ids(IMAGE),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_grid_pinpoints=source.get("image_grid_pinpoints"), vision_feature_layer=-1,
        vision_feature_select_strategy="full", vision_aspect_ratio=source.get("image_aspect_ratio", "anyres_max_9"),
        tie_word_embeddings=bool(source.get("tie_word_embeddings", False)), **ends)
    partial = dst.parent / f".{dst.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    config.save_pretrained(partial)
    generation = tf.GenerationConfig(bos_token_id=source.get("bos_token_id"), eos_token_id=source.get("eos_token_id"),
                                     pad_token_id=tokenizer.pad_token_id,
                                     suppress_tokens=tokenizer.convert_tokens_to_ids(added) or None)
    generation.save_pretrained(partial)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(partial / "model.safetensors"),
              metadata={"format": "pt"})
    size = vision["image_size"]
    image_processor = tf.SiglipImageProcessor(size={"height": size, "width": size})
    processor = tf.LlavaOnevisionProcessor(
        image_processor=tf.LlavaOnevisionImageProcessor(size={"height": size, "width": size},
                                                        image_grid_pinpoints=source.get("image_grid_pinpoints")),
        video_processor=tf.LlavaOnevisionVideoProcessor(size={"height": size, "width": size}), tokenizer=tokenizer,
        vision_feature_select_strategy="full", chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(partial)
    image_processor.save_pretrained(partial / "release_image_processor")
    (partial / RELEASE_FILE).write_text(json.dumps({
        "source": str(src.resolve()), "pool": "average", "stride": 2, "newline": "no_token", "conv": "qwen_1_5",
        "system": SYSTEM}, indent=1) + "\n")
    shutil.rmtree(dst, ignore_errors=True)
    partial.rename(dst)
    return dst


# ChatML with LLaVA-NeXT's system prompt, images before the text (transformers' path, and vi's prompts)
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    + SYSTEM + "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<image>\n{% elif part['type'] == 'video' %}<video>\n{% else %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def converted(src: Path) -> Path:
    """The converted folder of a LLaVA-NeXT checkpoint, made once in vi's cache (keyed by the source's path
    and its files' sizes and times, so an edited checkpoint is converted again)."""
    import hashlib

    from vi.core.models.sources import cache_dir

    src = Path(src).resolve()
    stamp = sorted((p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in src.iterdir() if p.is_file())
    key = hashlib.sha256(json.dumps([str(src), stamp]).encode()).hexdigest()[:16]
    dst = cache_dir() / "converted" / f"{src.name}-{key}"
    if not (dst / RELEASE_FILE).is_file():
        convert(src, dst)
    return dst


def release_text(query: str) -> str:
    """infer.py's prompt: `<image>\\n` before the query, in conv mode qwen_1_5."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{IMAGE}\n{query}<|im_end|>\n"
            "<|im_start|>assistant\n")


def release_inputs(model, tokenizer, image_processor, requests: list[tuple[str, list]]):
    """inputs_embeds and attention_mask (left-padded) of [(query, frames (H, W, 3) uint8)] as the release
    builds them: its prompt, the frames' features (tower, projector, 2x2 average pool, no newline) spliced
    where `<image>` is."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    inner = model.model
    embed = inner.get_input_embeddings()
    rows = []
    for query, frames in requests:
        before, after = release_text(query).split(IMAGE)
        pixels = image_processor(images=list(np.asarray(frames)), return_tensors="pt")["pixel_values"]
        pixels = pixels.to(embed.weight.device, inner.vision_tower.dtype)
        tower = inner.vision_tower.vision_model  # its last layer's output before post_layernorm: hidden_states[-1]
        hidden = tower.encoder(inputs_embeds=tower.embeddings(pixels)).last_hidden_state
        features = inner.multi_modal_projector(hidden)
        side = int(round(features.shape[1] ** 0.5))
        grid = features.view(len(frames), side, side, -1).permute(0, 3, 1, 2)
        pooled = F.avg_pool2d(grid, 2).permute(0, 2, 3, 1).reshape(-1, features.shape[-1])
        ids = [torch.tensor(tokenizer(text).input_ids, dtype=torch.long, device=embed.weight.device)
               for text in (before, after)]
        rows.append(torch.cat([embed(ids[0]), pooled.to(embed.weight.dtype), embed(ids[1])]))
    width = max(len(r) for r in rows)
    pad = embed.weight.new_zeros(embed.weight.shape[1])
    embeds = torch.stack([torch.cat([pad.expand(width - len(r), -1), r]) for r in rows])
    mask = torch.stack([torch.cat([torch.zeros(width - len(r), dtype=torch.long), torch.ones(len(r), dtype=torch.long)])
                        for r in rows]).to(embeds.device)
    return embeds, mask
