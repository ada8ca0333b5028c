"""`vi keyframes`: the frames of a sequence worth keeping (ProgressCaptioner, Sec. 6, keyframe selection).

The paper slides a 2-frame window over the frames: the captioner captions (v_{t-1}, v_t) together, an LLM
reads the two captions and says whether c_t shows progression over c_{t-1}, and v_t is kept when it does;
the number of keyframes follows the content. Here (`--method progress`):

- frame 0 is always kept (its caption is the one of the window (v_0, v_1));
- the captions of the window (v_{t-1}, v_t): a caption field whose items carry `from` = [t-1, t] (vi
  caption-frames --window 2 --keep-both gives every frame its caption from both windows it is in); else,
  with --captioner, they are made here by vi caption-frames' library with window 2; else the field's
  captions of frames t-1 and t as they are (a full-sequence caption, like the release's `response0`), which
  `keyframes_method.captions` then says ("pairwise" | "sequence" | "mixed");
- the judge is the paper's evaluation prompt ("Action Progression ... e.g. more of the task has been
  completed", with the record's action): keyframes should show the task advancing, and this prompt is the
  one that says a change of viewpoint or hand position is no progression, which the pseudo-labelling prompt
  ("noticeable changes") counts as a change. --prompt pseudo uses the other; either way the
  judge is asked as vi judge progression asks it (`judge_progression.PairJudge`: --debias, default
  channel+probe: the second caption scored as a later moment against as the same moment reworded, plus a
  change probe on the captions' sentence vectors), its score read --keep-bias spreads toward "change"
  (default 0, where vi judge progression reads it; a lean buys coverage with redundancy), and only a
  decided change keeps a frame: uncertain does not. A small judge answers "progressed" to nearly every pair, in
  either order of the letters (issue 38); asked for a letter, it kept about as many redundant frames as
  random frames would.

`--method uniform`: N frames evenly spaced over the sequence (first and last included), N = --count, else
the count of a progress run already in the record (`keyframes` with method progress), else 4.
`--method kmeans`: FrameCapEval's selection (`frame_selection.kmeans_selection`: K-means over image features,
K by silhouette in 3..6, the frame nearest each centre) without the near-duplicate frame it adds for the
benchmark (a keyframe set wants no repeated stage); it needs the frame images, and ignores --count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import check_choices, internal, option, with_default
from vi.core.errors import RecordError
from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.core.models.chat import ChatBackend, LLMConfig, check_llm
from vi.core.seeding import record_rng, record_seed
from vi.pipelines.progresscaptioner.judge_progression import (
    CHANNEL_SPREAD,
    DEFAULT_DEBIAS,
    PROBE_SPREAD,
    PROMPTS,
    SAME_STATE,
    PairJudge,
    ProgressionConfig,
    cached_pair_judge,
    check_debias,
    debias_templates,
    field_debias,
    load_embedder,
    record_action,
)

if TYPE_CHECKING:
    import numpy as np

STAGE = "keyframes"
METHODS = ("progress", "uniform", "kmeans")
REFERENCES = ("previous", "keyframe")
DEFAULT_COUNT = 4  # uniform's N when neither --count nor a progress run says
# spreads; a lean was tried on measure6-7, and 0.3 (chosen on four spent sets) on the blind measure12: not chosen,
# redundancy over half of random's (RESULTS.md)
KEEP_BIAS = 0.0


@dataclass(frozen=True, kw_only=True)
class KeyframesConfig(LLMConfig):
    """The options of `vi keyframes`, checked when built (a bad one: exit 2; a missing model: exit 5).
    The LLM (`llm`) is the judge of --method progress."""

    method: str = option("progress", choices=METHODS, help=(
        "progress: frame 0, then every frame t whose caption shows progression over frame t-1's (the "
        "judge LLM, the paper's method; the count follows the content). uniform: --count frames evenly "
        "spaced. kmeans: FrameCapEval's K-means over image features (K by silhouette, 3..6), one frame per "
        "cluster."))
    count: int | None = option(None, min=1, help=(
        "uniform: how many frames (default: the count of a progress run already in the record's "
        f"keyframes, else {DEFAULT_COUNT})."))
    captions: str = option("captions", help="The caption field to read (vi caption-frames --into).")
    reference: str = option("previous", choices=REFERENCES, help=(
        "progress: what frame t is judged against. previous: frame t-1 (the paper's sliding window). keyframe: "
        "the last frame kept, so a change the judge missed between t-1 and t is asked again, from further "
        "back, at t+1, and a stage drawn out over many frames cannot creep past the judge one small step at "
        "a time."))
    into: str = option("keyframes", help=(
        "Write the keyframes to this field (and FIELD_method), so methods can sit side by side."))
    prompt: str = option("eval", choices=PROMPTS, help=(
        "progress: the judge's prompt, eval (the paper's FrameCapEval prompt: has the action advanced? A "
        "viewpoint or hand change is no progression) or pseudo (are there noticeable changes?)."))
    prompt_file: Path | None = option(None, exists=True, dir_okay=False, help=(
        "Your own judge prompt (see the packaged prompt_templates/progression_*.txt; eval needs ${action}, "
        "${desc1}, ${desc2})."))
    image_model: str = option("auto", help=(
        "kmeans: image features from a CLIP model (alias or checkpoint) or efficientnet-lite0; auto takes "
        "CLIP when installed."))
    captioner: str | None = option(None, help=(
        "progress: make the captions of each window (v_{t-1}, v_t) here, with vi caption-frames' "
        "captioner (--window 2 --keep-both): a transformers VLM folder or hub id, openai:MODEL@URL, "
        "offline (the embedded-model captioner) or auto. Used for records whose caption field has no "
        "per-window captions; without it those records' captions are compared as they are."))
    keep_bias: float = option(KEEP_BIAS, help=(
        "progress, with a judge that scores (--debias channel, probe, channel+probe): how far toward 'change' its "
        f"score is read, in spreads (each signal's standard deviation: {CHANNEL_SPREAD:g} nats of the channel, "
        f"{PROBE_SPREAD:g} of the probe's log-odds); frame t is kept when its score is above minus this. 0 reads it "
        "where vi judge progression does, balanced between change and no change. Leaning trades redundancy for "
        "coverage: on a caption set written blind, 0.3 covered 0.89 of the stages with 0.20 of the kept frames "
        "redundant, against 0.85 and 0.14 at 0 (evaluation/progresscaptioner/RESULTS.md)."))
    debias: str = with_default(ProgressionConfig, "debias", DEFAULT_DEBIAS)
    embedder: str = with_default(ProgressionConfig, "embedder", DEFAULT_TEXT_EMBEDDING)
    same_state: float = with_default(ProgressionConfig, "same_state", SAME_STATE)
    swapped_prompt_file: Path | None = with_default(ProgressionConfig, "swapped_prompt_file", None)
    n_ctx: int = with_default(LLMConfig, "n_ctx", 2048)
    # vi caption-frames' config for --captioner, with --method progress: pairwise captions made here
    pair_captioning: object | None = internal(init=False, default=None)
    templates: dict | None = internal(init=False, default=None)  # order -> prompt (judge_progression.PairJudge)
    pair_judges: dict | None = internal(init=False, default=None)  # a PairJudge per LLM and debias, across records

    def __post_init__(self) -> None:
        if self.captioner and self.method == "progress":  # a missing captioner: before any record
            object.__setattr__(self, "pair_captioning", pair_captioner(self.captioner, device=self.device,
                                                                      seed=self.seed))
        check_choices(self)
        if self.count is not None and self.count < 1:
            raise ValueError(f"--count must be at least 1, got {self.count}")
        if not self.into.strip():
            raise ValueError("--into needs a field name")
        if self.method == "progress":
            check_llm(self.llm_settings)  # a bad --llm or a missing model: before any record
            object.__setattr__(self, "templates", debias_templates(self.prompt, self.debias, self.prompt_file,
                                                                   self.swapped_prompt_file))
            check_debias(self.debias, self.embedder, self.same_state, self.device)
            object.__setattr__(self, "pair_judges", {})
        elif self.method == "kmeans":
            from vi.pipelines.progresscaptioner.frame_selection import resolve_embedder

            resolve_embedder(self.image_model)  # a missing model: before any record

    def pair_judge(self, llm: ChatBackend, debias: str | None = None) -> PairJudge:
        """vi judge progression's way of asking `llm` (`debias` for these captions, `field_debias`; else
        --debias), kept per LLM object and debias."""
        return cached_pair_judge(self.pair_judges, llm, debias or self.debias, prompt=self.prompt,
                                 templates=self.templates, same_state=self.same_state,
                                 embedder=lambda: load_embedder(self.embedder, self.device), lean=self.keep_bias)


# --- the sequence --------------------------------------------------------------------------------

def sequence_length(record: dict, captions: dict | None) -> int:
    """Frames in the record: its `frames`, else the frames its captions name."""
    if isinstance(record.get("frames"), list) and record["frames"]:
        return len(record["frames"])
    items = captions.get("items") if isinstance(captions, dict) else None
    frames = [i["frame"] for i in items or [] if isinstance(i, dict) and isinstance(i.get("frame"), int)]
    if frames:
        return max(frames) + 1
    raise RecordError("missing_field", f"record {record['id']}: no 'frames' and no captions to count frames "
                      "from; run vi frames (and vi caption-frames) first")


def frame_time(record: dict, index: int):
    frames = record.get("frames")
    if isinstance(frames, list) and index < len(frames) and isinstance(frames[index], dict):
        return frames[index].get("time")
    return None


def caption_items(captions: dict | None) -> list[dict]:
    items = captions.get("items") if isinstance(captions, dict) else None
    return [i for i in items or [] if isinstance(i, dict) and isinstance(i.get("frame"), int)
            and isinstance(i.get("text"), str) and i["text"].strip()]


def first_captions(captions: dict | None) -> dict[int, str]:
    """Frame -> its first caption (a frame captioned from two windows keeps the earlier one)."""
    out: dict[int, str] = {}
    for item in caption_items(captions):
        out.setdefault(item["frame"], item["text"])
    return out


def window_of(item: dict) -> tuple[int, int] | None:
    span = item.get("from")
    if isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span):
        return span[0], span[1]
    return None


def is_pairwise(captions: dict | None) -> bool:
    return any(window_of(i) is not None for i in caption_items(captions))


def pair_captions(captions: dict | None, t: int) -> tuple[str | None, str | None, str]:
    """(c_{t-1}, c_t, how): the two captions of the window (v_{t-1}, v_t) when the items say which window
    they come from ("pairwise"), else each frame's first caption ("sequence")."""
    items = caption_items(captions)
    from_window = {i["frame"]: i["text"] for i in items if window_of(i) == (t - 1, t)}
    if t - 1 in from_window and t in from_window:
        return from_window[t - 1], from_window[t], "pairwise"
    first = first_captions(captions)
    return first.get(t - 1), first.get(t), "sequence"


# --- the three methods ---------------------------------------------------------------------------

def uniform_indices(length: int, count: int) -> list[int]:
    """`count` frames evenly spaced from the first to the last (all of them when count >= length)."""
    import numpy as np

    if count >= length:
        return list(range(length))
    return sorted({int(round(x)) for x in np.linspace(0, length - 1, count)})


def progress_count(record: dict, into: str) -> int | None:
    """How many keyframes a progress run already in the record kept."""
    for name in dict.fromkeys((into, "keyframes")):
        method = record.get(f"{name}_method")
        if isinstance(method, dict) and method.get("method") == "progress" and isinstance(record.get(name), list):
            return len(record[name])
    return None


def select_progress(record: dict, captions: dict | None, length: int, config: KeyframesConfig,
                    llm: ChatBackend) -> tuple[list[int], dict[int, str | None], dict]:
    action = record_action(record) if config.prompt == "eval" else None
    seed = record_seed(config.seed, record["id"]) % 2**32
    judge = config.pair_judge(llm, field_debias(config.debias, captions))
    kept, texts, letters, verdicts, how = [0], {}, [], [], set()
    first = first_captions(captions)
    for t in range(1, length):
        ref = kept[-1] if config.reference == "keyframe" else t - 1
        if ref == t - 1:
            before, after, source = pair_captions(captions, t)
        else:  # no window holds (ref, t): each frame's own caption
            before, after, source = first.get(ref), first.get(t), "sequence"
        if before is None or after is None:
            missing = ref if before is None else t
            raise RecordError("missing_caption", f"record {record['id']}: frame {missing} has no caption in "
                              f"'{config.captions}'; keyframes compare every frame's caption with the one it is "
                              "judged against")
        how.add(source)
        if t == 1:
            texts[0] = before
        verdict = judge.verdict(before, after, action=action, seed=seed,
                                where=f"record {record['id']}, frames {ref}-{t}: ")
        letters.append(verdict["letter"])
        verdicts.append(verdict)
        if verdict["change"] is True:
            kept.append(t)
            texts[t] = after
    if length == 1:
        texts[0] = first.get(0)
    info = {"llm": config.llm, "prompt": config.prompt, "debias": config.debias, "reference": config.reference,
            "keep_bias": config.keep_bias, "action": action,
            "captions": how.pop() if len(how) == 1 else "mixed" if how else None, "answers": letters,
            "verdicts": verdicts}
    return kept, texts, info


def image_features(record: dict, config: KeyframesConfig) -> tuple[np.ndarray, str]:
    """(features of the record's frame images, the embedder's name)."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError
    from vi.core.devices import resolve_placement

    images = []
    for i, frame in enumerate(record.get("frames") or []):
        path = frame.get("path") if isinstance(frame, dict) else frame
        try:
            with Image.open(path) as image:
                images.append(np.asarray(image.convert("RGB")))
        except (OSError, TypeError, UnidentifiedImageError) as exc:
            raise RecordError("unreadable_media", f"record {record['id']}: frame {i} ({path}) is not a readable "
                              f"image ({exc}); --method kmeans clusters the frame images") from None
    if not images:
        raise RecordError("missing_field", f"record {record['id']}: no 'frames' images; --method kmeans clusters "
                          "frame images (vi frames), captions alone cannot do")
    embedder = _embedder(config.image_model, resolve_placement(config.device, "auto", engine="torch"))
    features = np.concatenate([embedder.encode(image[None]) for image in images])  # sizes may differ
    return features, embedder.choice.name


_embedders: dict = {}


def _embedder(model: str, placement):
    from vi.pipelines.progresscaptioner import frame_selection

    if (model, placement) not in _embedders:
        _embedders[(model, placement)] = frame_selection.ImageEmbedder(
            frame_selection.resolve_embedder(model), placement, batch_size=8)
    return _embedders[(model, placement)]


def select_kmeans(record: dict, config: KeyframesConfig) -> tuple[list[int], dict]:
    from vi.pipelines.progresscaptioner import frame_selection

    features, name = image_features(record, config)
    choice = frame_selection.kmeans_selection(features, seed=config.seed, rng=record_rng(config.seed, record["id"]),
                                              max_frames=frame_selection.K_MAX + 1)
    kept = [i for i in choice.indices if i != choice.duplicate]
    return kept, {"model": name,
                  "k": choice.k, "silhouette": {str(k): round(s, 6) for k, s in choice.silhouette.items()},
                  "note": choice.note}


# --- the record ----------------------------------------------------------------------------------

def keyframes(record: dict, config: KeyframesConfig, llm: ChatBackend | None = None) -> dict:
    captions = record.get(config.captions)
    captions = captions if isinstance(captions, dict) else None
    length = sequence_length(record, captions)
    info: dict = {"method": config.method}
    texts: dict[int, str | None] = {}
    if config.method == "progress":
        if config.pair_captioning is not None and not is_pairwise(captions):
            captions = make_pair_captions(record, config)
        if captions is None:
            raise RecordError("missing_field", f"record {record['id']}: no '{config.captions}' captions; run vi "
                              "caption-frames --window 2 --keep-both first, or give --captioner")
        kept, texts, more = select_progress(record, captions, length, config, llm or config.load_llm())
        info.update(field=config.captions, **more)
    elif config.method == "uniform":
        found = progress_count(record, config.into)
        count = config.count or found or DEFAULT_COUNT
        kept = uniform_indices(length, count)
        info.update(count_from="--count" if config.count else "progress" if found else "default")
    else:
        kept, more = select_kmeans(record, config)
        info.update(more)
    first = first_captions(captions)
    info["count"] = len(kept)
    return {config.into: [{"index": i, "time": frame_time(record, i), "caption": texts.get(i, first.get(i))}
                          for i in kept],
            f"{config.into}_method": info}


def pair_captioner(vlm: str, *, device: str = "auto", seed: int = 0):
    """vi caption-frames' config for the paper's windows: (v_{t-1}, v_t), both captions of each kept."""
    from vi.pipelines.progresscaptioner.caption_frames import CaptionConfig

    return CaptionConfig(vlm=vlm, window="2", keep_both=True, device=device, seed=seed)


def make_pair_captions(record: dict, config: KeyframesConfig) -> dict:
    """Captions of every window (v_{t-1}, v_t), made by vi caption-frames' library."""
    from vi.pipelines.progresscaptioner.caption_frames import caption_batch

    (made,) = caption_batch([record], config.pair_captioning)
    if isinstance(made, Exception):
        raise made
    return made[config.pair_captioning.into]
