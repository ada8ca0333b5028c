"""`vi caption-frames`: one caption per frame of a sequence, progress-aware (ProgressCaptioner, CVPR 2025).

A record's `frames` ([{time, path}], from vi frames) are captioned in windows (`--window`):
- `full`: the whole sequence in one request, 2 to `max_frames` (6) frames. ProgressCaptioner is trained on 2
  to 6 and degrades beyond, so a longer sequence is refused with an error record that says to use --window N
  (or vi frames --select window|kmeans) rather than windowed silently: how to window is the user's choice,
  and `full` then means what it says. A single frame is refused too (`--window 1` captions single images).
- `N`: N-frame sliding windows, stride 1. Frame t's caption comes from the window that ends at t (with 2:
  (v_{t-1}, v_t)); frames before the first window's end take the first window's (with 2: frame 0 from
  (v0, v1)). `--keep-both` also keeps the captions of every other window holding the frame (with 2, the one
  from (v_t, v_{t+1})). Items of windowed runs say which frames the window held (`from`); a frame's first
  item is its caption, any further ones come from the other windows.
- `1`: every frame alone, the image-captioning baseline.
The request (`--prompt-style`; `request_for`), named in the field's `prompt`:
- `release` (default): the release's own request. A record that carries `query0` (the release's FrameCapEval
  sequences do, and vi frames --framecap passes it on) is sent its query0 unchanged, when the window is the
  whole sequence it was written for (`prompt: "query0"`); otherwise (no query0; a window of a longer
  sequence; frames vi frames --select picked out of it) the release's wording is built as its prepare_data.py
  builds it (`prompt: "release:<mode>"`): the packaged `progress_caption_release_<mode>` for `--desc-mode`
  object|pose|action (prepare_data's --desc_mode a|b|c), or for the mode the record's query0 was built
  with when it matches one. The reply format it shows is the release's: `<Frame 1>: Your description`,
  `...`, `<Frame N>: Your description`, each line ending in a newline as query0 does.
- `vi`: vi's packaged `progress_caption` (`progress_caption_no_action` without an `action`), the release's
  COIN wording with every frame's `<Frame i>:` line listed (`prompt: "vi"`).
- `--prompt FILE` overrides both wordings (`prompt`: the file); its ${frame_lines} follows --prompt-style.
The model's `<Frame i>:` reply is parsed by `frame_replies` (its repairs are written to `repairs`). A reply
that lacks a frame's caption is asked again once, sampled (temperature 0.7, another seed: greedy decoding
would repeat itself); if that reply lacks one too, the record is an error naming the window and the frames,
with both raw replies. With `missing="keep"` (--missing keep) it is not: the field is written with the
captions the replies gave, the uncaptioned frames listed in `missing` and the reason in `repairs`. That is for
records several captioners share (ProgressCaptioner's training data: K VLMs of varied quality): one weak
captioner then costs its own captions, not the others'; the judges and vi captioner-data count a field without
a caption for a frame as giving no pass and no sample.

Backends (`--vlm`): a transformers VLM folder or cached hub id (T images through its chat template, greedy,
`batch_size` requests per generate call, left-padded; see core/models/vlm_batch.py), `openai:MODEL@URL`
(images as base64 data URLs, `concurrency` requests in flight), or `offline` (offline_captioner.py; no
prompt). `auto`: the first cached VLM of vlm.KNOWN_VLMS, else offline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import check_choices, internal, option, with_default
from vi.core.devices import Placement, passive_openmp, resolve_placement
from vi.core.errors import RecordError
from vi.core.models import vision, vlm
from vi.core.models.catalog import DEFAULT_IMAGE_CLASSIFIER
from vi.core.models.chat import LLMConfig, LLMSpec
from vi.core.models.resolve import resolve
from vi.core.models.vlm import KNOWN_VLMS, HFModelFiles
from vi.core.progress import log
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt, parse_prompt
from vi.pipelines.progresscaptioner import offline_captioner as oc
from vi.pipelines.progresscaptioner.caption_windows import Window, assign, frame_paths, load_frames, plan_windows
from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies

if TYPE_CHECKING:
    import numpy as np

STAGE = "caption-frames"
PROMPT_STYLES = ("release", "vi")
MISSING_RECORDS = ("error", "keep")  # --missing
DESC_MODES = {"object": "a", "pose": "b", "action": "c"}  # the release's prepare_data.py --desc_mode letters
AUTO, OFFLINE = "auto", "offline"
MAX_FULL_FRAMES = 6
RETRY_TEMPERATURE = 0.7
RAW_SHOWN = 1500  # characters of each raw reply kept in an error message
RESERVED = ("id", "frames", "action", "errors", "source", "parent", "frame_select")


@dataclass(frozen=True, kw_only=True)
class CaptionConfig:
    """The options of `vi caption-frames`, checked when built (a bad one: exit 2; a missing model: exit 5)."""

    vlm: str = option(AUTO, help=(
        "The captioner. A transformers VLM folder or hub id in the local cache (LLaVA-OneVision, "
        "Qwen2-VL/Qwen2.5-VL, Idefics3/SmolVLM, a vi train captioner checkpoint), optionally written "
        "transformers:REF; openai:MODEL@URL for an OpenAI-compatible server (vLLM, SGLang, a hosted "
        "model; key from VI_LLM_API_KEY); offline: EfficientNet-Lite0's ImageNet labels and whether the "
        f"scene changed, said as such; auto: the first cached of {', '.join(KNOWN_VLMS)}, else offline."))
    window: str = option("full", help=(
        "full: the whole sequence in one request (2 to --max-frames frames); N: N-frame sliding windows, "
        "frame t captioned by the window ending at t (2: (v_{t-1}, v_t), frame 0 from (v0, v1)); 1: "
        "each frame alone (the image-captioning baseline)."))
    keep_both: bool = option(False, help=(
        "With --window 2 or more: also keep the captions from the other windows holding a frame (with 2, "
        "the one from (v_t, v_{t+1}))."))
    into: str = option("captions", help=(
        "The field to write, so that several captioners can sit in one record (captions_b, ...)."))
    prompt_style: str = option("release", choices=PROMPT_STYLES, help=(
        "release: the release's own request: the record's query0 (the release's FrameCapEval sequences carry "
        "it; vi frames --framecap passes it on) when the window is the sequence it was written for, else the "
        "release's wording for --desc-mode as its prepare_data.py builds it; the reply format shown is "
        "'<Frame 1>: Your description / ... / <Frame N>: Your description'. vi: vi's packaged progress_caption "
        "prompt (the release's COIN wording) listing every frame's line. --prompt overrides both wordings."))
    desc_mode: str = option("action", choices=DESC_MODES, help=(
        "With --prompt-style release, what a sequence without a usable query0 is asked to describe, as the "
        "release's prepare_data.py --desc_mode: object (a: the object's state during the action; what the "
        "release asked of HowToChange), pose (b: the subject's body pose), action (c: the action; COIN's)."))
    prompt: Path | None = option(None, help=(
        "Your own prompt (see the packaged prompt_templates/progress_caption*.txt); it must use "
        "${frame_lines} (the reply format, as --prompt-style shows it) and may use ${n_frames} and "
        "${action}."))
    # the longest of the 141 real 6-frame replies is 2387 characters, ~550 tokens
    max_new_tokens: int = option(768, help="Longest reply per request, in tokens.")
    batch_size: int = option(4, help=(
        "Requests per generate call of a transformers VLM (left-padded; a batch that fails, out of "
        "memory say, is redone one at a time)."))
    max_frames: int = option(MAX_FULL_FRAMES, help=(
        "The most frames --window full sends at once; longer sequences are error records that say to "
        "use --window N."))
    top_k: int = option(oc.TOP_K, help="Offline: ImageNet labels named per frame.")
    change_threshold: float = option(oc.CHANGE_THRESHOLD, help=(
        "Offline: image-feature cosine distance above which a frame counts as a changed view."))
    missing: str = option("error", choices=MISSING_RECORDS, help=(
        "A reply without some frame's caption, also after its retry: error (the record is an error "
        "record) or keep (the field keeps the captions given and lists the others in 'missing'; for "
        "records several captioners share, so a weak one costs only its own captions)."))
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    concurrency: int = with_default(LLMConfig, "concurrency", 1)  # requests in flight to an openai: server
    backend: str = internal(init=False)  # vlm | openai | offline
    size: int | None = internal(init=False)  # the window's frame count; None = full
    vlm_files: HFModelFiles | None = internal(init=False)
    spec: LLMSpec | None = internal(init=False)
    placement: Placement | None = internal(init=False)
    templates: dict[bool, ChatPrompt] = internal(init=False)  # vi's (or --prompt's), by whether there is an action
    release_templates: dict[str, ChatPrompt] = internal(init=False)  # the release's wording, by --desc-mode

    def __post_init__(self) -> None:
        passive_openmp()  # as vi describe: before the placement check loads torch
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", self.into) or self.into in RESERVED:
            raise ValueError(f"--into {self.into!r}: give a new field name (letters, digits, _), not one of "
                             f"{', '.join(RESERVED)}")
        size = None if self.window == "full" else int(self.window) if self.window.isdigit() else 0
        if size == 0 or (size or 0) > 64:
            raise ValueError(f"--window {self.window!r}: give full, or a window of 1 to 64 frames (2 to 6 is "
                             "what ProgressCaptioner is trained on)")
        if self.max_frames < 2 or self.max_new_tokens < 1 or self.batch_size < 1 or self.top_k < 1:
            raise ValueError("--max-frames must be at least 2, --max-new-tokens, --batch-size and --top-k at "
                             "least 1")
        check_choices(self)
        if self.keep_both and (size or 0) < 2:
            raise ValueError("--keep-both keeps the captions of overlapping windows: give --window 2 (or more)")
        backend, files, spec = _choose(self.vlm)
        set_ = lambda name, value: object.__setattr__(self, name, value)  # a frozen dataclass: set once, here
        set_("size", size), set_("backend", backend), set_("vlm_files", files), set_("spec", spec)
        set_("placement", None if backend == "openai" else resolve_placement(self.device, self.dtype, engine="torch"))
        set_("templates", {} if backend == OFFLINE else _templates(self.prompt))
        set_("release_templates", {} if backend == OFFLINE else release_templates())
        if backend == OFFLINE:
            resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier")  # a missing classifier stops the stage now
            if self.prompt is not None:
                log.info("caption-frames: the offline captioner uses no prompt; --prompt is ignored")
        elif backend == "openai":
            from vi.core.models.openai_chat import check_server

            check_server(spec)

    @property
    def kind(self) -> str:
        return {"vlm": "vlm", "openai": "openai", OFFLINE: oc.KIND}[self.backend]

    @property
    def model(self) -> str:
        if self.backend == "vlm":
            return self.vlm_files.label
        if self.backend == "openai":
            return f"{self.spec.model}@{self.spec.url}"
        return oc.model_name(self.top_k, self.change_threshold)


def _choose(ref: str) -> tuple[str, vlm.HFModelFiles | None, LLMSpec | None]:
    if ref == OFFLINE:
        return OFFLINE, None, None
    if ref.startswith("openai:"):
        return "openai", None, LLMSpec.parse(ref)
    if ref != AUTO:
        return "vlm", resolve(ref, "vlm"), None
    found = vlm.cached_vlm()
    if found is None:
        log.info("caption-frames: --vlm auto found no vision-language model in the local hub cache, so the "
                 "captions come from the offline captioner (EfficientNet-Lite0's ImageNet labels and view "
                 "changes; kind %r), not from a VLM. `hf download %s` on a connected machine, then --vlm auto "
                 "uses it; --vlm offline silences this", oc.KIND, vlm.KNOWN_VLMS[0])
        return OFFLINE, None, None
    log.info("caption-frames: --vlm auto uses %s from the local hub cache", found.label)
    return "vlm", found, None


def _templates(override: Path | None) -> dict[bool, ChatPrompt]:
    """{has an action: its prompt}. A --prompt file serves both, and may leave out ${action}/${n_frames}."""
    if override is None:
        return {True: load_prompt("progress_caption", None, ("n_frames", "action", "frame_lines")),
                False: load_prompt("progress_caption_no_action", None, ("n_frames", "frame_lines"))}
    used = parse_prompt(Path(override).read_text(encoding="utf-8"), str(override)).placeholders()
    prompt = load_prompt("", override, ("frame_lines",) + tuple(n for n in ("n_frames", "action") if n in used))
    return {True: prompt, False: prompt}


def release_templates() -> dict[str, ChatPrompt]:
    """{desc mode: the release's wording}, as prepare_data.py's prepare_query builds it (module doc)."""
    return {mode: load_prompt(f"progress_caption_release_{mode}", None, ("n_frames", "depicting", "frame_lines"))
            for mode in DESC_MODES}


# --- a record's prompt -----------------------------------------------------------------------

def action_of(record: dict) -> str | None:
    for name in ("action", "action_label"):
        value = record.get(name)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return None


def frame_lines(count: int, style: str) -> str:
    """The reply format a request shows. vi: every frame's `<Frame i>: Your description` line. release: as
    prepare_data.py writes it, `<Frame 1>: Your description`, `...` (only over 2 frames) and `<Frame N>: Your
    description`, each line ending in a newline (so the request ends in one, as the release's query0); for a
    single frame one line (prepare_query would list <Frame 1> twice; the release never asks about one frame)."""
    if style == "vi":
        return "\n".join(f"<Frame {i}>: Your description" for i in range(1, count + 1))
    last = [f"<Frame {count}>: Your description\n"] if count > 1 else []
    return "".join(["<Frame 1>: Your description\n", *(["...\n"] if count > 2 else []), *last])


def messages_for(config: CaptionConfig, action: str | None, count: int, style: str = "vi") -> list[dict]:
    """vi's packaged prompt, or the --prompt file, for `count` frames, the reply format as `style` shows it.
    Reads only `config.templates` (vi captioner-data renders vi's prompt through a stand-in holding them)."""
    values = {"n_frames": str(count), "frame_lines": frame_lines(count, style)}
    if action is not None:
        values["action"] = action
    template = config.templates[action is not None]
    if "action" in template.placeholders() and action is None:
        raise RecordError("missing_field", f"--prompt {template.source} uses ${{action}} but the record has no "
                          "'action'")
    return template.render(**{k: v for k, v in values.items() if k in template.placeholders()})


def release_messages(template: ChatPrompt, action: str | None, count: int) -> list[dict]:
    """The release's wording for `count` frames, filled as prepare_query fills it."""
    return template.render(n_frames=str(count), depicting="" if action is None else f" depicting {action}",
                           frame_lines=frame_lines(count, "release"))


def query_of(record: dict) -> str | None:
    """The release's own request for the sequence (its `query0`), when the record carries one."""
    query = record.get("query0")
    return query if isinstance(query, str) and query.strip() else None


def query_mode(templates: dict[str, ChatPrompt], query: str, action: str | None, count: int) -> str | None:
    """The desc mode whose wording `query` is, for `count` frames and `action`; None when it is none of them."""
    return next((mode for mode, template in templates.items()
                 if release_messages(template, action, count)[-1]["content"] == query), None)


def request_for(config: CaptionConfig, record: dict, count: int, whole: bool) -> tuple[list[dict], str]:
    """The request's turns for a window of `count` frames of `record` (`whole`: the window holds all of the
    record's frames), and what the field's `prompt` calls it: the --prompt file, "vi", "query0" or
    "release:<desc mode>" (module doc)."""
    action = action_of(record)
    if config.prompt is not None:
        return messages_for(config, action, count, config.prompt_style), str(config.prompt)
    if config.prompt_style == "vi":
        return messages_for(config, action, count, "vi"), "vi"
    mode, query = config.desc_mode, query_of(record)
    if query is not None:
        n = record.get("n_frames")  # what the release's query0 was written for; without it, the record's frames
        written_for = n if isinstance(n, int) and not isinstance(n, bool) else None
        if whole and written_for in (None, count):
            return [{"role": "user", "content": query}], "query0"
        found = query_mode(config.release_templates, query, action, written_for) if written_for else None
        mode = found or mode
        _note_once(f"the record's query0 was written for {written_for or 'all its'} frames and a request "
                   f"holds {count} of them (a --window, or frames vi frames --select picked), so the release's "
                   f"wording is built for those, with {'the desc mode its query0 uses' if found else '--desc-mode'} "
                   f"({mode}); record {record.get('id')}", key=("found" if found else "desc-mode"))
    return release_messages(config.release_templates[mode], action, count), f"release:{mode}"


_noted: set[str] = set()


def _note_once(message: str, key: str) -> None:
    if key not in _noted:
        _noted.add(key)
        log.info("caption-frames: %s (said once)", message)


@dataclass
class Job:
    """One record on its way: its windows, and each window's parsed captions once asked."""

    record: dict
    frames: list[np.ndarray]
    windows: list[Window]
    action: str | None
    messages: list[list[dict]] = field(default_factory=list)  # per window: the prompt's turns (not offline)
    prompt: str | None = None  # which wording asked (the field's `prompt`; request_for); None offline
    texts: dict[int, list[str | None]] = field(default_factory=dict)  # window index -> captions (None: missing)
    repairs: list[str] = field(default_factory=list)


def prepare(record: dict, config: CaptionConfig) -> Job:
    paths = frame_paths(record)
    windows = plan_windows(len(paths), config.size, config.max_frames, record["id"])
    action = action_of(record)
    asked = [] if config.backend == OFFLINE else [request_for(config, record, len(w), len(w) == len(paths))
                                                  for w in windows]
    names = list(dict.fromkeys(name for _, name in asked))  # one per record: all windows whole, or none
    return Job(record, load_frames(record, paths), windows, action, [m for m, _ in asked],
               ", ".join(names) if names else None)


def result(job: Job, config: CaptionConfig) -> dict:
    items, uncaptioned = [], set()
    for frame, w in assign(job.windows, len(job.frames), config.keep_both):
        window = job.windows[w]
        text = job.texts[w][window.index(frame)]
        if text is None:  # only with missing="keep"
            uncaptioned.add(frame)
            continue
        item = {"frame": frame, "text": text}
        if (config.size or 0) >= 2:
            item["from"] = list(window)
        items.append(item)
    captioned = {item["frame"] for item in items}
    out = {"model": config.model, "kind": config.kind, "window": "full" if config.size is None else config.size,
           "prompt": job.prompt, "items": items, "repairs": job.repairs}
    if uncaptioned - captioned:
        out["missing"] = sorted(uncaptioned - captioned)
    return {config.into: out}


def _where(job: Job, w: int, config: CaptionConfig) -> str:
    window = job.windows[w]
    if config.size is None:
        return "reply"
    return f"window frames[{window[0]}]" if len(window) == 1 else f"window frames[{window[0]}..{window[-1]}]"


# --- the backends -------------------------------------------------------------------------------

def caption_batch(records: list[dict], config: CaptionConfig) -> list[dict | Exception]:
    """`process_batch` of the stage: every window of every record, asked together."""
    jobs: list[Job | Exception] = []
    for record in records:
        try:
            jobs.append(prepare(record, config))
        except RecordError as exc:
            jobs.append(exc)
    live = [j for j in jobs if isinstance(j, Job)]
    if config.backend == OFFLINE:
        failed = _offline(live, config)
    else:
        failed = _prompted(live, config)
    return [j if isinstance(j, Exception) else failed.get(id(j)) or result(j, config) for j in jobs]


def _offline(jobs: list[Job], config: CaptionConfig) -> dict[int, Exception]:
    weights = resolve(DEFAULT_IMAGE_CLASSIFIER, "image-classifier")
    classifier = vision.load_imagenet_classifier(weights, config.placement)
    for job in jobs:
        looks = oc.look(classifier, job.frames, config.placement, config.top_k)
        for w, window in enumerate(job.windows):
            job.texts[w] = oc.caption_window([looks[i] for i in window], config.change_threshold)
    return {}


def _prompted(jobs: list[Job], config: CaptionConfig) -> dict[int, Exception]:
    """Ask, parse, ask again what lacks a frame, and fail the records whose retry lacks one too."""
    from vi.core.models.vlm_batch import ImageChat

    asks = [(job, w) for job in jobs for w in range(len(job.windows))]
    chats = [ImageChat(job.messages[w], [job.frames[i] for i in job.windows[w]]) for job, w in asks]
    seeds = [record_seed(config.seed, job.record["id"]) % 2**31 + w for job, w in asks]
    failed: dict[int, Exception] = {}
    first = _ask(config, chats, seeds, temperature=0.0)
    retry = []
    for k, ((job, w), reply) in enumerate(zip(asks, first)):
        if isinstance(reply, Exception):
            failed[id(job)] = reply
            continue
        parsed = parse_frame_replies(reply, len(job.windows[w]))
        if parsed.missing:
            retry.append((k, reply, parsed.missing))
        else:
            job.texts[w] = parsed.texts
            job.repairs += [f"{_where(job, w, config)}: {r}" for r in parsed.repairs]
    second = _ask(config, [chats[k] for k, _, _ in retry], [seeds[k] + 7919 for k, _, _ in retry],
                  temperature=RETRY_TEMPERATURE) if retry else []
    for (k, old, missing), reply in zip(retry, second):
        job, w = asks[k]
        where = _where(job, w, config)
        parsed = parse_frame_replies(reply, len(job.windows[w])) if isinstance(reply, str) else None
        if parsed is not None and not parsed.missing:
            job.texts[w] = parsed.texts
            job.repairs.append(f"{where}: the first reply had no caption for <Frame {', '.join(map(str, missing))}>; "
                               f"asked again (sampled, temperature {RETRY_TEMPERATURE}, seed {seeds[k] + 7919})")
            job.repairs += [f"{where}: {r}" for r in parsed.repairs]
            continue
        still = parsed.missing if parsed is not None else missing
        frames = [job.windows[w][i - 1] for i in still]
        if config.missing == "keep":
            # the better of the two replies (fewer frames missing) is kept, with what it lacks said
            best = parsed if parsed is not None and len(parsed.missing) < len(missing) else \
                parse_frame_replies(old, len(job.windows[w]))
            job.texts[w] = best.texts
            job.repairs.append(f"{where}: no caption for <Frame {', '.join(map(str, best.missing))}> (frames "
                               f"{[job.windows[w][i - 1] for i in best.missing]}), also after one retry; kept "
                               f"without (--missing keep); raw reply: {old[:RAW_SHOWN]!r}")
            continue
        failed.setdefault(id(job), RecordError(
            "frames_missing", f"record {job.record['id']}: the {where} has no caption for <Frame "
            f"{', '.join(map(str, still))}> (frames {frames}), also after one retry; raw reply: "
            f"{old[:RAW_SHOWN]!r}; retry: {str(reply)[:RAW_SHOWN]!r}"))
    return failed


def _ask(config: CaptionConfig, chats: list, seeds: list[int], temperature: float) -> list[str | Exception]:
    from vi.core.models import vlm_batch

    if config.backend == "vlm":
        model = vlm.load_vlm(config.vlm_files, config.placement)
        return list(vlm_batch.generate(model, chats, config.max_new_tokens, batch_size=config.batch_size,
                                       temperature=temperature, seed=seeds[0] if seeds else 0))
    return vlm_batch.ask_server(config.spec, chats, config.max_new_tokens, seeds, temperature=temperature,
                                concurrency=config.concurrency)
