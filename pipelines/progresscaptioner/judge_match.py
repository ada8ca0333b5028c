"""`vi judge match`: does each frame get its own caption? (ProgressCaptioner's caption matching)

For each caption field and each of the M frames (`progression.distinct` when vi judge progression ran,
else every frame), a judge sees the frame and the M captions of those frames plus "None of the above
..." and answers with a letter. Verdict per sequence, as the paper: good (c+) when every frame gets its
own caption, rejected (c-, DPO's rejected sample) when more than half of the M frames do not, neither
otherwise.

Letter bias: the M captions are shuffled per frame with `random.Random(record_seed(seed, f"{id}:{frame}"))`
(sha256 of "{seed}:{id}:{frame}": the same on any shard, resume or machine), so the right caption sits
under a different letter from frame to frame and a judge that prefers "A" gains nothing; the "none"
option stays last, as in the paper's prompt. Every captioner of a record gets the same order per frame.

Judges (`--vlm`):
- a transformers VLM folder or cached hub id (`core.models.vlm`): the frame alone and the prompt; the
  first capital letter among the options' letters in the reply is the answer; a reply without one counts
  as "none", with a `note` giving the reply;
- openai:MODEL@URL: the frame as a base64 data URL, the reply constrained to {"answer": one of the
  letters}; a reply that still breaks it counts as "none" with a note;
- offline (the default when no VLM is cached): the image-text scorer of vi align-frames
  (`frame_scorers`; --scorer, by default EfficientNet-Lite0's ImageNet labels embedded with MiniLM)
  scores the M captions against the frame; the best is chosen unless it beats the runner-up by less
  than --none-margin (its similarity units), then "none"; with one caption it is chosen. `scorer` says
  "offline:..." and each frame entry carries the captions' `scores`, in option order.
A frame without a caption in a field is not asked (options null, correct false, note "no caption").
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core.config import internal, option, with_default
from vi.core.devices import Placement, resolve_placement
from vi.core.errors import RecordError
from vi.core.models.chat import LLMConfig
from vi.core.progress import log
from vi.core.seeding import record_seed
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.progresscaptioner.judge_progression import ProgressionConfig, caption_fields, frame_texts, one_line

if TYPE_CHECKING:
    import numpy as np

STAGE = "judge-match"
NONE_TEXT = ("None of the above descriptions match the image, are hard to determine, or contain incorrect "
             "information about the image.")
AUTO, OFFLINE = "auto", "offline"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
DEFAULT_NONE_MARGIN = 0.01


def shuffled_options(seed: int, record_id: object, frame: int, frames: list[int]) -> list[int | None]:
    """The M frames' captions in this frame's seeded order, then None for "none of the above"."""
    order = list(frames)
    random.Random(record_seed(seed, f"{record_id}:{frame}")).shuffle(order)
    return [*order, None]


def options_text(options: list[int | None], texts: dict[int, str]) -> str:
    return "\n".join(f"{LETTERS[k]}. {one_line(texts[o]) if o is not None else NONE_TEXT}"
                     for k, o in enumerate(options))


def first_letter(reply: str, count: int) -> int | None:
    """The position of the first option letter in a free reply ("B", "B.", "(B)", "Answer: B"); the word
    "I" ("I think ...") is not a letter."""
    for match in re.finditer(r"\b([A-Z])\b", reply):
        if match.group(1) == "I" and re.match(r"\s+[a-z]", reply[match.end():]):
            continue
        if LETTERS.index(match.group(1)) < count:
            return LETTERS.index(match.group(1))
    return None


def load_image(record: dict, frame: int) -> np.ndarray:
    frames = record.get("frames")
    entry = frames[frame] if isinstance(frames, list) and frame < len(frames) else None
    path = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(path, str) or not path:
        raise RecordError("missing_field", f"record {record['id']}: frame {frame} has no 'path' in 'frames'; "
                          "vi judge match reads the frames vi frames writes")
    try:
        import numpy as np
        from PIL import Image

        with Image.open(path) as image:
            return np.array(image.convert("RGB"))  # writable: torch refuses read-only arrays
    except OSError as exc:
        raise RecordError("unreadable_media", f"record {record['id']}: frame {frame} ({path}) cannot be read: "
                          f"{exc}; re-run vi frames, or fix the path") from None


# --- judges: choose(image, captions in option order, prompt text, key) -> (option position, extras) --------
# (key, "id:frame", seeds the random baseline scorer)

class VLMJudge:
    def __init__(self, config: MatchConfig):
        from vi.core.models import vlm
        from vi.core.models.resolve import resolve

        self.files = resolve(config.vlm, "vlm") if config.vlm != AUTO else vlm.cached_vlm()
        self.config, self.name = config, f"vlm:{self.files.label}"

    def choose(self, image: np.ndarray, captions: list[str], prompt: str, key: str) -> tuple[int, dict]:
        from vi.core.models import vlm

        reply = vlm.load_vlm(self.files, self.config.placement).caption(prompt, image[None],
                                                                      self.config.max_new_tokens)
        position = first_letter(reply, len(captions) + 1)
        if position is None:
            return len(captions), {"note": f"no option letter in the reply {reply[:200]!r}: counted as none"}
        return position, {}


class ServerJudge:
    def __init__(self, config: MatchConfig):
        from vi.core.models.chat import LLMSettings, LLMSpec, check_llm

        self.spec = LLMSpec.parse(config.vlm)
        check_llm(LLMSettings(config.vlm, n_ctx=config.n_ctx))
        self.config, self.name = config, config.vlm

    def choose(self, image: np.ndarray, captions: list[str], prompt: str, key: str) -> tuple[int, dict]:
        from vi.core.models.openai_chat import image_part, load_openai_chat
        from vi.pipelines.progresscaptioner.judge_progression import parse_letter

        letters = list(LETTERS[:len(captions) + 1])
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": letters}},
                  "required": ["answer"]}
        server = load_openai_chat(self.spec, n_ctx=self.config.n_ctx, in_flight=self.config.concurrency)
        messages = [{"role": "user", "content": [image_part(image), {"type": "text", "text": prompt}]}]
        reply = server.chat(messages, schema=schema, max_tokens=16, temperature=0.0)
        letter = parse_letter(reply.text, letters)
        if letter is None:
            return len(captions), {"note": f"the reply {reply.text[:200]!r} names no option: counted as none"}
        return letters.index(letter), {}


class OfflineJudge:
    def __init__(self, config: MatchConfig):
        from vi.pipelines.common import frame_scorers

        self.choice = frame_scorers.resolve_scorer(config.scorer)
        self.config, self.name = config, f"offline:{self.choice.name}"

    def choose(self, image: np.ndarray, captions: list[str], prompt: str, key: str) -> tuple[int, dict]:
        import numpy as np

        from vi.pipelines.showhowto.align_frames import scorer_for

        scorer = scorer_for(self.choice, self.config.placement, 32).for_record(self.config.seed, key)
        scores = scorer.similarity(scorer.encode_texts(captions), scorer.encode_frames(image[None]))[:, 0]
        ranked = np.argsort(-scores, kind="stable")
        best = int(ranked[0])
        if len(scores) > 1 and scores[best] - scores[ranked[1]] < self.config.none_margin:
            best = len(captions)  # no caption stands out: "none of the above"
        return best, {"scores": [round(float(s), 4) for s in scores]}


@dataclass(frozen=True, kw_only=True)
class MatchConfig:
    """The options of `vi judge match`, checked when built (a bad one: exit 2; a missing model: exit 5)."""

    vlm: str = option(AUTO, help=(
        "The judge: a vision-language model folder or cached hub id (AutoModelForImageTextToText: "
        "LLaVA-OneVision, Qwen2-VL, ...); openai:MODEL@URL, a multimodal server (frames sent as data "
        "URLs, the letter constrained); offline, the image-text scorer of vi align-frames (see --scorer, "
        "--none-margin); auto: the first cached VLM, else offline."))
    # offline: what frame_scorers.resolve_scorer takes (vi align-frames --model)
    scorer: str = option("imagenet-labels", help=(
        "The offline scorer, as vi align-frames --model: imagenet-labels (EfficientNet-Lite0's labels "
        "embedded with MiniLM), a cached CLIP model, or random (the chance baseline)."))
    none_margin: float = option(DEFAULT_NONE_MARGIN, help=(
        "Offline: the best caption is chosen only when its score beats the runner-up's by at least this "
        "(the scorer's similarity units); otherwise the answer is \"none of the above\"."))
    prompt_file: Path | None = option(None, help=(
        "Your own prompt instead of the packaged caption_match.txt; it must use ${options} (the lettered "
        "captions, one per line)."))
    captions: tuple[str, ...] = with_default(ProgressionConfig, "captions", ())
    max_new_tokens: int = option(8, help="Longest VLM reply, in tokens.")
    n_ctx: int = internal(4096)  # an openai: judge's context window; one image and a short prompt fit
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    concurrency: int = with_default(LLMConfig, "concurrency", 1)  # requests in flight to an openai: judge
    placement: Placement = internal(init=False)
    template: ChatPrompt = internal(init=False)
    judge: VLMJudge | ServerJudge | OfflineJudge = internal(init=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.none_margin) or self.none_margin < 0:
            raise ValueError(f"--none-margin must be zero or a positive number, got {self.none_margin}")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        object.__setattr__(self, "placement", resolve_placement(self.device, self.dtype, engine="torch"))
        object.__setattr__(self, "template", load_prompt("caption_match", self.prompt_file, needs=("options",)))
        object.__setattr__(self, "judge", make_judge(self))


def make_judge(config: MatchConfig) -> VLMJudge | ServerJudge | OfflineJudge:
    if config.vlm.startswith("openai:"):
        return ServerJudge(config)
    if config.vlm == AUTO:
        from vi.core.models import vlm

        if vlm.cached_vlm() is None:
            log.info("judge match: --vlm auto found no vision-language model in the local hub cache, so the "
                     "offline image-text scorer (%s) matches the captions (--vlm offline silences this)",
                     config.scorer)
            return OfflineJudge(config)
    return OfflineJudge(config) if config.vlm == OFFLINE else VLMJudge(config)


def match_frames(record: dict) -> list[int]:
    """The frames to match: progression.distinct when present, else every frame."""
    distinct = (record.get("progression") or {}).get("distinct") if isinstance(record.get("progression"),
                                                                                dict) else None
    frames = record.get("frames")
    if not isinstance(frames, list) or not frames:
        raise RecordError("missing_field", f"record {record['id']}: no 'frames' list; vi judge match shows the "
                          "judge each frame, as vi frames writes them")
    if distinct is None:
        return list(range(len(frames)))
    if not (isinstance(distinct, list) and all(isinstance(f, int) and 0 <= f < len(frames) for f in distinct)):
        raise RecordError("bad_field", f"record {record['id']}: progression.distinct {distinct!r} is not a "
                          f"list of frame indices below {len(frames)}; re-run vi judge progression")
    if len(distinct) + 1 > len(LETTERS):
        raise RecordError("too_many_frames", f"record {record['id']}: {len(distinct)} frames to match, more "
                          f"than {len(LETTERS) - 1} option letters; window the sequence with vi frames")
    return distinct


def verdict(correct: list[bool]) -> str:
    wrong = correct.count(False)
    return "good" if wrong == 0 else "rejected" if wrong > len(correct) / 2 else "neither"


def match_record(record: dict, config: MatchConfig) -> dict:
    frames = match_frames(record)
    images: dict[int, np.ndarray] = {}
    out = {}
    for name in caption_fields(record, config.captions):
        texts = frame_texts(record, name)
        present = [f for f in frames if f in texts]
        entries = []
        for frame in frames:
            if frame not in texts:
                entries.append({"frame": frame, "options": None, "answer": None, "chosen": None,
                                "correct": False, "note": "no caption"})
                continue
            options = shuffled_options(config.seed, record["id"], frame, present)
            prompt = config.template.render(options=options_text(options, texts))[-1]["content"]
            if frame not in images:
                images[frame] = load_image(record, frame)
            position, extra = config.judge.choose(images[frame], [texts[o] for o in options[:-1]], prompt,
                                                  f"{record['id']}:{frame}")
            entries.append({"frame": frame, "options": options, "answer": LETTERS[position],
                            "chosen": options[position], "correct": options[position] == frame, **extra})
        out[name] = {"scorer": config.judge.name, "seed": config.seed, "frames": entries,
                     "verdict": verdict([e["correct"] for e in entries])}
        if isinstance(config.judge, OfflineJudge):
            out[name]["none_margin"] = config.none_margin
    return {"matching": out}
