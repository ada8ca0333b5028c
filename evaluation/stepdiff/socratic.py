"""The Socratic baseline of StepDiff (Sec. 4): describe each clip in words, then let a text LLM
answer about the two descriptions, scoring by the LLM's own likelihoods.

The descriptions take the place of the two videos in the prompt StepDiff's model gets (the
system prompt of `stepdiff_predict`), and the LLM answers as that model would:
- DiffCap: its greedy continuation of "The main difference in {category} is that in Video 2,",
  in the annotation style ("... instead of ...");
- DiffMCQ: log P("In Video 2, {caption}") summed over the caption's tokens, given each pair
  (the caption is the same for the four options, so sums compare like with like);
- DiffRank: P(YES) / (P(YES) + P(NO)) for "Do these two videos show the same {category}?".

A clip's description is `description.step` of a `vi describe` record (or a `description`
string of your own captioner), read from a file or made here by `vi describe`'s code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vi.core.errors import RecordError
from vi.core.models.llm import ChatLLM, answer_probability, complete_reply, continuation_log_probs, load_chat_llm
from vi.core.progress import log
from vi.core.records import dumps
from vi.evaluation.stepdiff import predict as sp
from vi.evaluation.stepdiff.metrics import BenchmarkFileError, read_jsonl

NOT_AVAILABLE = "(no description available)"


def description_text(record: dict) -> str | None:
    """The sentence a describe record holds: `description.step`, or a plain `description` string."""
    value = record.get("description")
    if isinstance(value, dict):
        value = value.get("step")
    return (" ".join(value.split()) or None) if isinstance(value, str) else None


def read_descriptions(path: Path, clips: set[str]) -> tuple[dict[str, str], list[str]]:
    """({clip id: description} for the clips asked, [clips whose record is an error record or
    has no sentence]); a clip with no record at all is an error naming it."""
    found: dict[str, str] = {}
    empty: list[str] = []
    for lineno, record in read_jsonl(path):
        clip = record.get("id")
        if clip not in clips:
            continue
        text = description_text(record)
        if text is None:
            empty.append(clip)
            continue
        if clip in found and found[clip] != text:
            raise BenchmarkFileError(f"{path} line {lineno}: a second, different description of clip {clip}")
        found[clip] = text
    empty = sorted(set(empty) - set(found))
    missing = sorted(clips - set(found) - set(empty))
    if missing:
        raise BenchmarkFileError(f"{path} has no description of {len(missing)} clips of the benchmark, e.g. "
                                 f"{', '.join(missing[:3])}; describe them (vi clips --from-benchmark ... | vi "
                                 "describe) or give --video-root to describe them here")
    return {**found, **{clip: NOT_AVAILABLE for clip in empty}}, empty


def describe_clips(videos: dict, describe: Callable[[dict], dict], advance: Callable[[int], None] = lambda n: None
                   ) -> tuple[dict[str, str], list[dict]]:
    """({clip id: sentence}, records to save) for the clips in `videos` ({id: ClipVideo}), each
    described by `describe` (vi describe's function on a clip record). A clip that cannot be
    described is shown as NOT_AVAILABLE, and saved as an error record: read back, it is
    warned about again rather than taken for a sentence."""
    sentences, records = {}, []
    for clip in sorted(videos):
        video = videos[clip]
        try:
            text = description_text(describe({"id": clip, "video": video.path, "start": video.start,
                                               "end": video.end}))
            records.append({"id": clip, "description": text})
        except RecordError as exc:
            log.warning("predict: clip %s has no description (%s)", clip, exc.message)
            text = None
            records.append({"id": clip, "error": {"kind": exc.kind, "message": exc.message}})
        sentences[clip] = text or NOT_AVAILABLE
        advance(1)
    return sentences, records


def lower_first(text: str) -> str:
    """"The rib eye ..." -> "the rib eye ...", to follow "In Video 2,"; "DIY ..." stays."""
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        return text[0].lower() + text[1:]
    return text


class Socratic:
    def __init__(self, llm: ChatLLM, descriptions: dict[str, str], max_new_tokens: int = 64, seed: int = 0):
        self.llm, self.descriptions = llm, descriptions
        self.max_new_tokens, self.seed = max_new_tokens, seed

    def messages(self, reference: str, candidate: str, question: str) -> list[dict[str, str]]:
        system = sp.SYSTEM.format(reference=self.descriptions[reference].rstrip("."),
                                  candidate=self.descriptions[candidate].rstrip("."))
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]

    def caption(self, reference: str, candidate: str, category: str) -> str:
        phrase = sp.category_phrase(category)
        reply = complete_reply(self.llm, self.messages(reference, candidate, sp.DIFFCAP_QUESTION.format(category=phrase)),
                               sp.DIFFCAP_SEED.format(category=phrase), max_tokens=self.max_new_tokens, seed=self.seed)
        return sp.annotation_style(reply.text)

    def option_score(self, reference: str, candidate: str, caption: str, category: str) -> float:
        question = sp.DIFFMCQ_QUESTION.format(category=sp.category_phrase(category))
        return sum(continuation_log_probs(self.llm, self.messages(reference, candidate, question),
                                          " " + lower_first(" ".join(caption.split())), sp.DIFFMCQ_SEED))

    def target_score(self, reference: str, target: str, category: str) -> float:
        question = sp.DIFFRANK_QUESTION.format(category=sp.category_phrase(category))
        return answer_probability(self.llm, self.messages(reference, target, question))


def build(config: sp.PredictConfig, rows: list[sp.BenchmarkRow], advance_clips: Callable[[int], Callable[[int], None]]
          ) -> Socratic:
    """The method for `vi predict --method socratic`: a sentence per clip (--descriptions, or made here
    from --video-root as vi describe makes it), then the LLM."""
    needed = {clip for item in rows for clip in sp.row_clips(config.task.value, item.row)}
    if config.descriptions:
        descriptions, empty = read_descriptions(config.descriptions, needed)
        if empty:
            log.warning("predict: %d clips have no description in %s (error records?), e.g. %s; they are "
                        "shown to the LLM as %r", len(empty), config.descriptions, empty[0], NOT_AVAILABLE)
    else:
        descriptions = describe_here(config, rows, needed, advance_clips)
    llm = load_chat_llm(config.llm, n_ctx=config.n_ctx, device=config.device, seed=config.seed)
    return Socratic(llm, descriptions, config.max_new_tokens, config.seed)


def describe_here(config: sp.PredictConfig, rows: list[sp.BenchmarkRow], needed: set[str],
                  advance_clips: Callable[[int], Callable[[int], None]]) -> dict[str, str]:
    """{clip id: sentence} made by vi describe's code from the clips' videos (saved with --save-descriptions)."""
    from vi.pipelines.stepdiff import describe as ds

    describer = ds.DescribeConfig(vlm=config.vlm, llm=config.llm, n_ctx=config.n_ctx, device=config.device,
                                  dtype=config.dtype, seed=config.seed)
    videos = sp.clip_videos(config.task.value, rows, config.video_root, str(config.gt))
    sentences, records = describe_clips({c: videos[c] for c in needed}, lambda r: ds.describe(r, describer),
                                        advance_clips(len(needed)))
    if config.save_descriptions:
        config.save_descriptions.write_text("".join(dumps(r).decode() for r in records))
    return sentences
