"""Golden fixtures from the ProgressCaptioner release's own model code (LLaVA-NeXT / LLaVA-OneVision).

Makes, with the release's code (github bpiyush/ProgCaptioner, first commit c36e7b6, whose vendored LLaVA-NeXT
is imported from the checkout given on the command line; none of it is copied here):

* ``tests/progresscaptioner/data/llava_next_tiny/``: a tiny random checkpoint stored the way the release's model
  (LLaVA-OneVision-Qwen2-7B) is stored, i.e. in LLaVA-NeXT's own format: ``config.json`` (``LlavaQwenForCausalLM``,
  ``model_type: llava_qwen``, the Qwen2 fields and OneVision's ``mm_*`` fields), ``model.safetensors`` (bf16, as
  ``LlavaQwenForCausalLM(config).save_pretrained`` writes it; keys listed by ``--keys``), a Qwen2 byte-level BPE
  tokenizer with ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, and ``siglip_vision_tower/``: the SigLIP
  vision model that ``mm_vision_tower`` names (transformers ``SiglipVisionModel.save_pretrained`` plus its
  ``SiglipImageProcessor``).
* ``tests/progresscaptioner/data/llava_next_golden.pt``: inputs and outputs of that checkpoint run exactly as the
  release's ``infer.py`` runs its model (fp32 on CPU instead of fp16 on CUDA).

Remake (from the repository root; the vendored code needs the transformers of its time, installed outside the
venv with ``pip install --no-deps --target /work/release/progcap_deps transformers==4.40.2 tokenizers==0.19.1``)::

    HF_HUB_OFFLINE=1 PYTHONPATH=/work/release/progcap_deps:/work/release/progcap/LLaVA-NeXT \\
        .venv/bin/python evaluation/progresscaptioner/llava_next_golden.py --release /work/release/progcap

Checkpoint geometry. The release's ``SigLipVisionTower`` hard-codes SigLIP-so400m's geometry (its own
``SigLipVisionConfig()``: 384 px, patch 14 -> 27x27 = 729 patches, used for ``num_patches_per_side`` and asserted
in ``forward``) and its image processor (``SigLipImageProcessor()``, 384 px). The tiny tower keeps that 27x27 grid
(54 px images, patch 2), so the release's pooling runs on the real grid size unpatched; only the image
processor's size has to follow the tiny tower (54 px; patch (d) below).

``mm_vision_tower`` resolution. ``build_vision_tower`` picks ``SigLipVisionTower`` only when the name contains
"siglip" and is *not* an existing path (an existing path selects the CLIP tower), and the tower then loads it with
``SigLipVisionModel.from_pretrained(name)`` (for the real model a hub id, ``google/siglip-so400m-patch14-384``).
The fixture's ``config.json`` says ``"mm_vision_tower": "siglip_vision_tower"``, a folder *relative to the
checkpoint folder*; this script resolves it there (patch (a)), standing in for the hub. So run it from anywhere
but the checkpoint folder itself. A converter should read that folder as ``checkpoint/mm_vision_tower`` when it
exists. The checkpoint's own ``model.vision_tower.vision_tower.*`` weights (which the release loads over the
tower's) differ from ``siglip_vision_tower/``'s, as the real checkpoint's fine-tuned tower differs from SigLIP's;
and they hold one encoder layer fewer (the tower deletes its last layer; its head is an Identity).

What runs (all release code): ``load_pretrained_model(path, None, "llava-onevision-qwen2-tiny",
overwrite_config=infer.py's {mm_spatial_pool_mode: average, mm_spatial_pool_stride: 4, mm_newline_position:
no_token}, device_map="auto", ...)`` (as infer.py, which passes no device_map; on a machine with no GPU "auto" puts
everything on the CPU, and the builder's ``vision_tower.to("cuda")`` is only for other device maps), the query
of ``prepare_data.prepare_query`` with the COIN wording, ``<image>\\n`` + ``conv_templates["qwen_1_5"]``,
``tokenizer_image_token``, ``image_processor.preprocess``, the model's forward (``prepare_inputs_labels_for_multimodal``
+ Qwen2) and ``model.generate`` with infer.py's arguments.

Patches (each only what running on CPU in fp32 needs):
  (a) ``SigLipVisionModel.from_pretrained`` resolves a relative tower name against the checkpoint folder;
  (b) ``load_pretrained_model`` has no fp32 branch (any torch_dtype but float16/bfloat16 reaches
      ``pdb.set_trace()``): that breakpoint is made a no-op, so no torch_dtype is passed on and
      ``from_pretrained`` builds in its default float32;
  (c) ``attn_implementation="eager"`` instead of the default flash_attention_2 (CUDA only);
  (d) the tower's image processor is the release's own ``SigLipImageProcessor`` built with the tiny tower's size
      (54 px) instead of its hard-coded 384 px;
  (e) infer.py's ``.half().cuda()`` / ``.cuda()`` are left out (fp32, CPU);
  (f) ``prepare_data`` imports cv2 (for frame extraction, not used by ``prepare_query``): an empty stand-in
      module is put in ``sys.modules`` if cv2 is missing.
  The model name is passed explicitly (infer.py derives it from the folder name; it must contain "llava" and
  "qwen" for the builder to take its LlavaQwen branch, and not "progresscaptioner", which loads the tokenizer
  from the hub).

Findings the fixture pins down (see the .pt's ``meta``): the vendored ``prepare_inputs_labels_for_multimodal``
pools video features with ``get_2dPool(feat)`` at its default stride 2 (the ``mm_spatial_pool_stride=4`` overwrite
is only read by the commented-out ``encode_multimodals``), ``avg_pool2d`` (mode "average"), so 27x27 -> 13x13 =
169 tokens per frame, with no newline token (``no_token``); and the builder resizes the token embeddings and
lm_head to ``len(tokenizer)`` (``config.vocab_size`` is padded, as OneVision's 152064 vs 151646 tokens), so the
release's logits have ``len(tokenizer)`` columns.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # llava.conversation tries to fetch a Llama-3 tokenizer at import

RELEASE = "bpiyush/ProgCaptioner"
RELEASE_COMMIT = "c36e7b6"
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "progresscaptioner" / "data"
TOWER = "siglip_vision_tower"
MODEL_NAME = "llava-onevision-qwen2-tiny"
SEED = 0
IMAGE = 54  # SigLIP input size; patch 2 -> the release's 27x27 grid
PATCH = 2
OVERWRITE = {"mm_spatial_pool_mode": "average", "mm_spatial_pool_stride": 4, "mm_newline_position": "no_token"}
FRAMES = (3, 30, 40)  # frames, height, width
MAX_NEW_TOKENS = 12
COMMAND = (
    "HF_HUB_OFFLINE=1 PYTHONPATH=/work/release/progcap_deps:/work/release/progcap/LLaVA-NeXT "
    ".venv/bin/python evaluation/progresscaptioner/llava_next_golden.py --release /work/release/progcap"
)


def _release_imports(release: Path) -> None:
    sys.path.insert(0, str(release / "LLaVA-NeXT"))
    sys.path.insert(0, str(release))


def _redirect_tower(folder: Path) -> None:
    """Patch (a): the tower name (a hub id for the real model) resolves against the checkpoint folder."""
    from llava.model.multimodal_encoder import siglip_encoder

    cls = siglip_encoder.SigLipVisionModel
    original = cls.from_pretrained.__func__

    def from_pretrained(klass, name, *args, **kwargs):
        local = folder / name
        if not os.path.isabs(name) and local.is_dir():
            name = str(local)
        return original(klass, name, *args, **kwargs)

    cls.from_pretrained = classmethod(from_pretrained)


def _release_query(release: Path, n_frames: int) -> tuple[str, dict]:
    """The COIN query of the release's data file, re-made by the release's prepare_query for `n_frames` frames."""
    if "cv2" not in sys.modules:
        try:
            import cv2  # noqa: F401
        except ImportError:  # patch (f)
            sys.modules["cv2"] = types.ModuleType("cv2")
    from prepare_data import prepare_query

    first = json.loads((release / "data/data_files/input/coin_valhs_seq.json").read_text())[0]
    # COIN's wording: action name = the sequence's action label, description mode "c" (action); check it.
    assert prepare_query(first["n_frames"], first["action_label"], "c") == first["query0"], "COIN wording changed"
    return prepare_query(n_frames, first["action_label"], "c"), first


def _tokenizer(release: Path):
    """A small byte-level BPE Qwen2 tokenizer (256 bytes + merges learnt from the release's queries + ChatML)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    corpus = []
    for name in ("coin_valhs_seq.json", "htc_valhs_seq.json"):
        corpus += [d["query0"] for d in json.loads((release / "data/data_files/input" / name).read_text())]
    corpus += ["system\nYou are a helpful assistant.\nuser\nassistant\n"] * 8
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus,
        trainers.BpeTrainer(vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    bpe.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])  # Qwen2's order, after the vocabulary
    return Qwen2TokenizerFast(
        tokenizer_object=bpe,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=32768,
    )


def build_checkpoint(release: Path, folder: Path) -> Path:
    """Step 1: the tiny LLaVA-NeXT-format checkpoint folder (deterministic)."""
    import shutil

    import torch
    import transformers as tf

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tokenizer = _tokenizer(release)
    ids = dict(
        zip(
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
        )
    )

    torch.manual_seed(SEED)
    vision = tf.SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE,
        patch_size=PATCH,
    )
    tf.SiglipVisionModel(vision).save_pretrained(folder / TOWER)
    tf.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE}).save_pretrained(folder / TOWER)
    processor_file = folder / TOWER / "preprocessor_config.json"  # drop transformers 4.40's internal key list
    processor = json.loads(processor_file.read_text())
    processor.pop("_valid_processor_keys", None)
    processor_file.write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")

    _redirect_tower(folder)
    from llava.model.language_model.llava_qwen import LlavaQwenConfig, LlavaQwenForCausalLM

    side = [IMAGE * k for k in range(1, 7)]
    config = LlavaQwenConfig(
        # Qwen2 (as Qwen2-7B, scaled down); vocab_size padded beyond len(tokenizer) as OneVision's; initializer_range
        # 0.2 (not 0.02) so that the random model's greedy reply varies and its top-2 margins are clear
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=32768,
        initializer_range=0.2,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        use_sliding_window=False,
        sliding_window=131072,
        max_window_layers=2,
        attention_dropout=0.0,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        # LLaVA-OneVision's multimodal fields (infer.py overwrites the pool mode/stride and newline position)
        mm_vision_tower=TOWER,
        mm_hidden_size=vision.hidden_size,
        mm_projector_type="mlp2x_gelu",
        mm_vision_select_layer=-2,
        mm_vision_select_feature="patch",
        mm_patch_merge_type="spatial_unpad",
        mm_resampler_type=None,
        mm_spatial_pool_mode="bilinear",
        mm_spatial_pool_stride=2,
        mm_newline_position="grid",
        mm_use_im_start_end=False,
        mm_use_im_patch_token=False,
        use_mm_proj=True,
        mm_tunable_parts="mm_vision_tower,mm_mlp_adapter,mm_language_model",
        vision_tower_pretrained=None,
        image_aspect_ratio="anyres_max_9",
        image_grid_pinpoints=[[h, w] for h in side for w in side],
        image_crop_resolution=None,
        image_split_resolution=None,
        tokenizer_model_max_length=32768,
        tokenizer_padding_side="right",
        use_pos_skipping=False,
        pos_skipping_range=4096,
    )
    torch.manual_seed(SEED)
    model = LlavaQwenForCausalLM(config)  # loads the tower from siglip_vision_tower/ and drops its last layer
    with torch.no_grad():
        inner = model.get_model()
        # image_newline is torch.empty in LlavaMetaModel; initialise it as initialize_vision_modules does
        inner.image_newline.copy_(torch.randn(config.hidden_size) / config.hidden_size**0.5)
        # Qwen2's init leaves biases zero and norm weights one: make them random too (projector, q/k/v biases, norms)
        for name, p in model.named_parameters():
            if "vision_tower" in name:
                continue
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif "norm" in name:
                p.copy_(1 + torch.randn_like(p) * 0.1)
        # the checkpoint's (fine-tuned) tower differs from siglip_vision_tower/
        for p in inner.get_vision_tower().parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)  # OneVision stores bf16
    tokenizer.save_pretrained(folder)
    return folder


def _patched_builder():
    """Patch (b): the builder's pdb breakpoint for a dtype other than float16/bfloat16 becomes a no-op."""
    import pdb  # noqa: T100 - to neutralise the release builder's breakpoint, not to debug

    class NoBreak:
        def __enter__(self):
            self.saved = pdb.set_trace
            pdb.set_trace = lambda *a, **k: None

        def __exit__(self, *exc):
            pdb.set_trace = self.saved

    return NoBreak()


def golden(release: Path, folder: Path) -> dict:
    """Steps 2-4: load the folder with the release's builder and run infer.py's steps in fp32 on CPU."""
    import numpy as np
    import torch
    import transformers
    from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
    from llava.conversation import conv_templates
    from llava.mm_utils import tokenizer_image_token
    from llava.model.builder import load_pretrained_model
    from llava.model.multimodal_encoder.siglip_encoder import SigLipImageProcessor

    torch.manual_seed(SEED)
    _redirect_tower(folder)
    with _patched_builder():
        tokenizer, model, image_processor, context_len = load_pretrained_model(
            str(folder),
            None,
            MODEL_NAME,
            device_map="auto",
            torch_dtype="float32",
            attn_implementation="eager",
            overwrite_config=dict(OVERWRITE),
        )
    model.eval()
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    tower = model.get_vision_tower()
    assert type(tower).__name__ == "SigLipVisionTower" and tower.num_patches_per_side == 27
    # patch (d): the release's processor class at the tiny tower's size
    image_processor = tower.image_processor = SigLipImageProcessor(
        size=(IMAGE, IMAGE), crop_size={"height": IMAGE, "width": IMAGE}
    )

    query0, first = _release_query(release, FRAMES[0])
    video = np.random.default_rng(SEED).integers(0, 256, (*FRAMES, 3), dtype=np.uint8)  # as load_images stacks
    pixel_values = image_processor.preprocess(video, return_tensors="pt")["pixel_values"]  # .half().cuda() left out

    qs = DEFAULT_IMAGE_TOKEN + "\n" + query0  # mm_use_im_start_end is False
    assert not model.config.mm_use_im_start_end
    conv = conv_templates["qwen_1_5"].copy()
    conv.append_message(conv.roles[0], qs)
    conv.append_message(conv.roles[1], None)
    prompt = conv.get_prompt()
    input_ids = tokenizer_image_token(prompt, tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt").unsqueeze(0)
    assert tokenizer.pad_token_id is not None
    attention_mask = input_ids.ne(tokenizer.pad_token_id).long()

    # record the pooled video features as the vendored code computes them (a pass-through wrapper)
    pooled = []
    get_2d_pool = model.get_2dPool

    def recording_pool(feature, *args, **kwargs):
        out = get_2d_pool(feature, *args, **kwargs)
        pooled.append(out.detach().clone())
        return out

    model.get_2dPool = recording_pool
    with torch.inference_mode():
        # generate's first step: prepare_inputs_labels_for_multimodal + the Qwen2 forward over the whole prompt
        _, _, mm_mask, _, inputs_embeds, _ = model.prepare_inputs_labels_for_multimodal(
            input_ids, None, attention_mask, None, None, [pixel_values], ["video"]
        )
        video_features = pooled[0]  # [frames, 13*13, hidden]: projector, then get_2dPool (stride 2, avg_pool2d)
        logits = model(inputs_embeds=inputs_embeds, attention_mask=mm_mask, use_cache=False).logits
        forward_logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            images=[pixel_values],
            modalities=["video"],
            use_cache=False,
        ).logits
        assert torch.equal(logits, forward_logits)
        # how much the reply's first logits depend on the video (frames in reverse order), for the record
        reversed_logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            images=[pixel_values.flip(0)],
            modalities=["video"],
            use_cache=False,
        ).logits
        sensitivity = float((reversed_logits[0, -1] - logits[0, -1]).abs().max())
        # infer.py's call (max_new_tokens 12 instead of 1024), also returning each step's logits
        scored = model.generate(
            inputs=input_ids,
            images=[pixel_values],
            attention_mask=attention_mask,
            modalities="video",
            do_sample=False,
            temperature=0.0,
            max_new_tokens=MAX_NEW_TOKENS,
            top_p=0.1,
            num_beams=1,
            use_cache=True,
            output_logits=True,
            return_dict_in_generate=True,
        )
    model.get_2dPool = get_2d_pool
    output_ids = scored.sequences  # one generate call: its sequences and its per-step logits
    step_logits = torch.cat(scored.logits).float()
    assert torch.equal(step_logits[0], logits[0, -1])
    top2 = step_logits.topk(2, dim=-1).values
    text = tokenizer.batch_decode(output_ids, skip_special_tokens=True)[0].strip()

    assert all(torch.equal(p, video_features) for p in pooled[1:2] + pooled[3:])  # forward, generate: same
    n_text = int((input_ids != IMAGE_TOKEN_INDEX).sum())
    assert inputs_embeds.shape[1] == n_text + video_features.shape[0] * video_features.shape[1]  # no newline token
    return {
        "frames": torch.from_numpy(video),  # uint8 [3, 30, 40, 3] RGB
        "pixel_values": pixel_values,  # fp32 [3, 3, 54, 54] from the release's SigLipImageProcessor
        "query0": query0,
        "prompt": prompt,
        "input_ids": input_ids,  # IMAGE_TOKEN_INDEX (-200) marks where the video goes
        "attention_mask": attention_mask,
        "image_token_index": IMAGE_TOKEN_INDEX,
        "logits": logits,  # fp32 [1, inputs_embeds_len, len(tokenizer)]
        "inputs_embeds_len": int(inputs_embeds.shape[1]),
        "video_start": int((input_ids[0] == IMAGE_TOKEN_INDEX).nonzero()[0, 0]),
        "video_features": video_features,  # fp32 [3, 169, 64]
        "generated_ids": output_ids[0].tolist(),  # new tokens only (generate from inputs_embeds)
        "generated_text": text,
        "generate_step_logits": step_logits,  # fp32 [steps, len(tokenizer)]
        "meta": {
            "release": RELEASE,
            "release_commit": RELEASE_COMMIT,
            "transformers": transformers.__version__,
            "torch": str(torch.__version__),
            "command": COMMAND,
            "model_name": MODEL_NAME,
            "overwrite_config": OVERWRITE,
            "source_query0": first["query0"],
            "source_idx": first["idx"],
            "len_tokenizer": len(tokenizer),
            "config_vocab_size_on_disk": 320,
            "pooling": "get_2dPool default stride 2, avg_pool2d: 27x27 -> 13x13 per frame; no newline token",
            "attn_implementation": "eager",
            "dtype": "float32",
            "device": "cpu",
            "min_greedy_margin": float((top2[:, 0] - top2[:, 1]).min()),
            "context_len": context_len,
            "last_logits_change_frames_reversed": sensitivity,
        },
    }


def _digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", type=Path, required=True, help="checkout of bpiyush/ProgCaptioner (c36e7b6)")
    parser.add_argument("--out", type=Path, default=DATA, help="fixture folder (default tests/progresscaptioner/data)")
    parser.add_argument("--checkpoint-only", action="store_true", help="make only the checkpoint folder")
    parser.add_argument("--keys", action="store_true", help="print the checkpoint's keys and shapes")
    args = parser.parse_args()
    release = args.release.resolve()
    folder = (args.out / "llava_next_tiny").resolve()
    _release_imports(release)
    os.chdir(ROOT)
    build_checkpoint(release, folder)
    print(json.dumps(_digest(folder), indent=1))
    if args.keys:
        from safetensors import safe_open

        with safe_open(folder / "model.safetensors", "pt") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open is not iterable
                print(k, tuple(f.get_slice(k).get_shape()))
    if args.checkpoint_only:
        return
    import torch

    result = golden(release, folder)
    torch.save(result, args.out / "llava_next_golden.pt")
    print({k: (tuple(v.shape) if hasattr(v, "shape") else v) for k, v in result.items() if k != "meta"})
    print(json.dumps(result["meta"], indent=1))


if __name__ == "__main__":
    main()
