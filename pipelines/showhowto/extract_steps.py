"""`vi extract-steps`: WikiHow-style steps with start/end times from a timestamped transcript.

ShowHowTo (Sec. 3.1) prompts an LLM with the transcript's lines and asks for concise,
actionable, temporally ordered steps, each with the times it is carried out; a step may span
several lines. Here the lines are numbered (`[n] text`) and each step cites the first and
last line that state it; the model never types a time, and each step's start and end are the
start of its first line and the end of its last. (A small model asked to type times copies
the time of a neighbouring line.)

Which lines make a step (`segmentation`):
- "filtered" (the default): the model writes the steps, at most MAX_STEPS per chunk, and a first
  pass labels each line STEP, MORE or TALK (narration_labels.py). Each step is then placed on the
  lines its words are said on (`grounding` "said", step_grounding.py: the steps' texts aligned in
  the model's order to the lines by a sentence embedder, the citation and the labels as priors),
  not on the lines it cites: the 1.5B model cites the line before or after, sometimes several
  lines off. A step whose every line is TALK (a greeting, an aside, the outro) is dropped; a
  labelled run (a STEP line and the MORE lines after it) that no step of the model's is on is
  written as a step too, from what was said there (one more request, only where there is one);
  each is listed in `steps.repairs`. A chunk whose lines are all talk costs no request.
  With `drop_remarks` (the default since it met its rules on blind sets 17 and 18:
  evaluation/showhowto/RESULTS.md, eighteenth and nineteenth passes), a step whose text reads as a
  remark rather than an action (scored, not asked: step_remarks.py) is dropped too, and
  `steps.remarks` says "scored". With `drop_previews` (the default), a step said on the intro's
  plan or an outro's recap (a line naming, in order, several steps said after or before it:
  step_summaries.py) is dropped, and `steps.previews` says "dropped".
  With `talk_probe` (off by default), a probe on a sentence embedder reads each line for talk
  too (narration_probe.py): fewer steps made of talk, more true steps lost. With `start_probe`,
  another reads whether a line starts a step or goes on with the one above: fewer steps merge.
  A step that copies its one line is a fine step (a clean narration says one step per sentence).
  Only where the model listed the narration, talk and all (most of its steps copies, one of
  them a line labelled TALK), its citations say nothing about where a step ends: then a copied
  line labelled MORE is folded into the step before it, and a record vi filter-instructional
  has not labelled is asked its question once (screen_record): the vlog's lines about the day
  read as steps to the labels, and a No is a not_instructional error record.
- "model": the model's citations as they are, with no label pass.
- "labels": the labels make the steps (a STEP line and the MORE lines after it) and the model only
  writes one instruction per step, the reply's schema fixing each step's lines.
The measures are in evaluation/showhowto/RESULTS.md. The citations are checked either way
(step_citations.py: order, overlap, repeats; with `grounding` "cited", a citation one line off
moved towards its words); what is repaired is listed in `steps.repairs`, and a reply with no
usable step is an error record.

A transcript longer than the model's context is cut into chunks of whole lines. Each chunk
owns a stretch of time (its "core") and is shown with `overlap_s` seconds of neighbouring
lines for context; a step is kept from the chunk whose core holds its start, so steps in
the overlap are neither lost nor doubled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from vi.core.errors import RecordError
from vi.core.records import finite_number
from vi.core.config import check_choices, internal, option
from vi.core.devices import resolve_placement
from vi.core.models.catalog import DEFAULT_TEXT_EMBEDDING
from vi.core.models.chat import LLMConfig, LLMSettings, check_llm, gives_likelihoods
from vi.core.seeding import record_seed
from vi.core.stream import RecordStage
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt
from vi.pipelines.common.transcript_text import Segment, is_speech, speech_segments, transcript_segments
from vi.pipelines.showhowto.filter_instructional import FilterConfig, classify
from vi.pipelines.showhowto.narration_labels import Rereading, label_lines, read_by_likelihood, step_runs
from vi.pipelines.showhowto.narration_probe import load_line_probe, with_probes
from vi.pipelines.showhowto.step_citations import (COPY_SHARE, SegmentNames, cited_steps, copied_steps,
                                                   copied_talk_lines, copies_talk, drop_talk, fold_copies,
                                                   line_number, opens_a_step)
from vi.pipelines.showhowto.step_grounding import ground_steps
from vi.pipelines.showhowto.step_remarks import (REMARK_MARGIN, detail_scores, drop_remarks, instruction_scores,
                                                  step_readings)
from vi.pipelines.showhowto.step_splits import apply_cuts, find_cuts, head_lines
from vi.pipelines.showhowto.step_summaries import drop_summaries

STAGE = "extract-steps"
NO_TITLE = "(no title)"
MAX_STEPS = 15  # per chunk; ShowHowTo's videos have 7.7 +- 2.8 steps
SAFETY_TOKENS = 64  # the token count of a rendered chat is estimated, not exact
SEGMENTATIONS = ("filtered", "labels", "model")
GROUNDINGS = ("said", "cited")
OPENINGS = ("first-line", "until-step")  # the lines the talk probe reads beside the label pass (--opening)
CLOSINGS = ("none", "back-to-step")  # the closing lines the talk probe reads beside the label pass (--closing)
REST_AFTER = ("cited", "said")  # where a full reply's steps end, for --ask-rest (--rest-after)
# A labelled run no step of the model's is on is written as a step only where the label pass gives
# its first line P(STEP) of at least this: more likely a new step than not. The 1.5B model's labels
# call many descriptive lines STEP by a small margin; the model's own steps are the main source.
STEP_SURE = 0.5


def steps_schema(line_numbers: list[int]) -> dict:
    """The reply's JSON schema; a cited line can only be one of `line_numbers` (llama.cpp's
    grammar has no integer bounds, so they are an enum)."""
    line = {"enum": list(line_numbers)}
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 150},
            "steps": {"type": "array", "minItems": 0, "maxItems": MAX_STEPS, "items": {
                "type": "object",
                "properties": {"first_line": line, "last_line": line,
                               "text": {"type": "string", "maxLength": 300}},
                "required": ["first_line", "last_line", "text"]}},
        },
        "required": ["title", "steps"],
    }


def opening_words(text: str, count: int = 8) -> str:
    words = text.split()
    return " ".join(words[:count]) + (" ..." if len(words) > count else "")


def labelled_steps_schema(runs: list[tuple[int, int]], said: list[str] | None = None) -> dict:
    """The reply's schema when the labels fixed the steps: step i cites exactly `runs[i]`
    (line numbers) and, with `said`, first repeats the opening words of what was said then, so
    the model writes each instruction right after the words it is about (without them, the
    1.5B model wrote step 3's instruction at step 2's lines)."""
    def step(k: int, first: int, last: int) -> dict:
        fields = {"first_line": {"const": first}, "last_line": {"const": last}}
        if said is not None:
            fields["said"] = {"const": opening_words(said[k])}
        return {"type": "object", "properties": {**fields, "text": {"type": "string", "maxLength": 300}},
                "required": [*fields, "text"]}
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 150},
            "steps": {"type": "array", "minItems": len(runs), "maxItems": len(runs),
                      "prefixItems": [step(k, a, b) for k, (a, b) in enumerate(runs)]},
        },
        "required": ["title", "steps"],
    }


def numbered_lines(segments: list[Segment], first: int = 1) -> list[str]:
    """The transcript lines as the prompt shows them: `[n] text`, numbered from `first`."""
    return [f"[{n}] {s.text}" for n, s in enumerate(segments, first)]


@dataclass(frozen=True, kw_only=True)
class ExtractConfig(LLMConfig):
    """The options of `vi extract-steps` (the LLM's in LLMConfig), checked when built."""

    # which lines make a step: see the module's docstring
    segmentation: str = option("filtered", choices=SEGMENTATIONS, help=(
        "Which lines make a step. filtered (default): the model writes the steps, each is placed "
        "on the lines it is said on (--grounding), and a first pass that labels each line STEP, "
        "MORE or TALK (greeting, aside, opinion, outro) drops the steps whose lines are all talk "
        "and adds the labelled steps the model missed. model: the citations alone. "
        "labels: the labels make the steps and the model writes one instruction per step: no "
        "talk becomes a step, but some steps merge (evaluation/showhowto/RESULTS.md)."))
    # where a step's lines come from, with --segmentation filtered
    grounding: str = option("said", choices=GROUNDINGS, help=(
        "Where each step's lines (and so its times) come from, with --segmentation filtered. said "
        "(default): the lines its words are said on, the steps' texts aligned in order to the "
        "transcript lines by --text-model, the model's citation and the labels as priors. cited: "
        "the lines the model cited, moved at most two lines towards its words (the 1.5B model "
        "cites the line before or after, sometimes further)."))
    talk_probe: bool = option(False, help=(  # narration_probe.py says why; off: it costs recall on real narration
        "With --segmentation filtered or labels, a second reading of each line decides whether it "
        "is talk, beside the label pass: a probe on a sentence embedder (model_configs/"
        "narration_talk_probe.json), which reads talk about the task (how the result looks, a tip, "
        "a recap) as talk where the 1.5B model's labels do not. Fewer steps made of talk, more "
        "true steps lost (evaluation/showhowto/RESULTS.md). In process only: a server's labels are its own."))
    start_probe: bool = option(False, help=(  # narration_probe.py says why
        "With --segmentation filtered or labels, a second reading of each line decides whether it "
        "starts a step or goes on with the one above, beside the label pass: a probe on a sentence "
        "embedder (model_configs/narration_start_probe.json), which reads a new action the 1.5B "
        "model calls MORE as a step's start, so fewer steps merge (evaluation/showhowto/RESULTS.md). "
        "In process only: a server's labels are its own."))
    opening: str = option("until-step", choices=OPENINGS, help=(  # narration_labels.labels_from_scores says why
        "With --segmentation filtered or labels, which lines of a chunk's opening the talk probe "
        "(model_configs/narration_talk_probe.json) reads as their second view beside the label pass, "
        "where the model would read the line alone: until-step (default), each line until one is not "
        "labelled TALK, so a first step said after a greeting is not read as talk; first-line, the "
        "chunk's first line only (a first line read alone is read as a greeting), as before blind set 22 "
        "(evaluation/showhowto/RESULTS.md). In process only, and not with --talk-probe, which reads every line."))
    closing: str = option("none", choices=CLOSINGS, help=(  # narration_labels.labels_from_scores says why
        "With --segmentation filtered or labels, whether the talk probe reads the video's closing lines too, "
        "as a third view beside the label pass's two: back-to-step, from the last line back, each line not "
        "labelled talk until one stays a step, so a closing worded as an instruction (\"enjoy it while it's "
        "hot\") is not kept as a step; none (default), as before (evaluation/showhowto/RESULTS.md). In process "
        "only, and not with --talk-probe, which reads every line."))
    after_talk: bool = option(False, help=(  # narration_labels.labels_from_scores says why
        "With --segmentation filtered or labels, a line labelled talk after a run of talk as long as the label "
        "window (an aside, a story) is read again as a first line is: alone, with the talk probe as its second "
        "view, and is a step where that reading says so. The 1.5B model goes on with its own talk labels after "
        "an aside whatever the line says, and the steps said there are dropped as talk. Off by default: on one blind "
        "set it found one true step more and lost none, and with --after-more on another one more "
        "(evaluation/showhowto/RESULTS.md). In process only, and not with --talk-probe."))
    after_more: bool = option(True, help=(  # narration_labels.labels_from_scores says why
        "With --segmentation filtered or labels, a line labelled as going on with the step above after a run of "
        "such lines as long as the label window is read again as a first line is: alone, with the talk probe as "
        "its second view, and starts a step or is talk where that reading says so. The 1.5B model goes on with "
        "its own labels through new steps and asides alike, and the steps said there merge into one. On by "
        "default since blind set 30, where with --ask-rest it found five true steps more than without them "
        "both, kept the share of steps on a true step's line and lost no step of a clean clip "
        "(evaluation/showhowto/RESULTS.md). In process only, and not with --talk-probe."))
    ask_rest: bool = option(True, help=(  # steps_after_cap says why
        "With --segmentation filtered or model, where the model's reply holds the most steps it may (15 a chunk) "
        "and its last step is cited before the chunk's last line, the lines after it are asked for again, alone, "
        "until a reply is not full. A model that lists the narration line by line reaches the cap halfway "
        "through a long narration, and the steps said after it are otherwise written by nobody (the cap is said "
        "in repairs either way). On by default since blind set 30, with --after-more, which reads again the "
        "MORE lines where the late steps it writes would fold back (alone, on blind set 29, it found fewer "
        "true steps; evaluation/showhowto/RESULTS.md)."))
    rest_after: str = option("cited", choices=REST_AFTER, help=(  # steps_after_cap says why
        "With --ask-rest, where a full reply's steps end, and so which lines are asked for again: cited, after "
        "the last line a step cites (default); said, after the last line a step's words are said on where that "
        "is later (with --segmentation filtered and --grounding said; elsewhere cited). The 1.5B model cites "
        "early: a full reply whose steps run to the narration's end in words can cite its middle, and the lines "
        "asked for again are written twice (blind set 30's risotto). Not the default: on blind set 31 it wrote "
        "fewer stray steps but one closing line as a step more (evaluation/showhowto/RESULTS.md)."))
    drop_remarks: bool = option(True, help=(  # step_remarks.py says why and how
        "With --segmentation filtered, each written step's text is scored as the model's reply to two "
        "requests, one action of the task or a remark (a comment on the result, a story, a tip, a recap, a "
        "greeting); a step likelier as a remark by more than 2 nats (a factor e²) is dropped and listed in "
        "repairs. Needs a backend that scores text (llama.cpp); others keep every step."))
    read_requests: bool = option(True, help=(  # step_remarks.py says why
        "With --drop-remarks, each written step's text is also scored as the reply to a request for something "
        "the narrator asks the viewers to do on the video's page or channel (comment, like, subscribe, share, "
        "tag), and a step likelier as that than as an action by more than 2 nats is dropped too. The 1.5B "
        "model reads such a closing as an action the viewer carries out, not as a remark (blind set 31's "
        "\"Let me know in the comments how often you reseal yours\"). On by default since blind set 33, where "
        "it dropped 34 of 51 closing remarks (22 without) and none of 90 actions "
        "(evaluation/showhowto/RESULTS.md)."))
    requests_name_the_page: bool = option(False, help=(  # step_remarks.py says why
        "With --read-requests, a step is read against the request to the viewers only where its text names "
        "something the request is done on or with (comment, like, subscribe, share, tag, follow, the channel, "
        "the video, a link, the description, the bell, below, \"let me know\", \"tell me\", \"send me\"); any "
        "other step is read against a remark alone. The 1.5B model reads a brief action that names no object "
        "of the task as a request (blind set 43's \"Repeat that about five times.\", dropped). Off: on blind set "
        "44 it kept one more true step in seven narrations, but on its written step texts it saved one action "
        "and let back one sign-off, which its rule counted as no gain (evaluation/showhowto/RESULTS.md)."))
    read_listed_talk: bool = option(False, help=(  # listed_talk says why
        "With --segmentation filtered, a chunk's steps are taken as the narration listed line by line (and a "
        "step copying a line labelled MORE is folded into the step before) only where a copied line labelled "
        "talk among them also reads as talk: scored as --drop-remarks scores steps, one likelier as an action "
        "by more than 2 nats does not count. The 1.5B label pass can call a brief instruction talk (\"chill at "
        "least one hour\"), and a clean clip's copied actions were then folded into one another (blind set 31's "
        "garlic butter: 4 steps for 7). Off: blind sets 32 and 34 had no reply it applies to, so nothing decided it "
        "(evaluation/showhowto/RESULTS.md). Needs "
        "a backend that scores text (llama.cpp); others count every copied talk line."))
    read_folds: bool = option(True, help=(  # own_actions says why
        "With --segmentation filtered, where the model listed the narration and its copies of lines labelled MORE "
        "would be folded into the step before, each such line is first scored as the reply to a request for an "
        "action against one for a detail of the step before (an amount, a size, a time, a setting, how to tell "
        "it is done); one likelier as an action by more than 2 nats stays a step of its own. The 1.5B label pass "
        "calls runs of brief actions MORE, and the fold then merged them (blind set 34's peanut noodles: \"drain "
        "them and rinse with cold water\" and \"slice up a cucumber\" folded into \"now drop the noodles in\"). "
        "On by default since blind set 35, where it found 60 of 71 true steps by line against 58, with 63 of 67 "
        "steps on a true step's line against 60 of 64 (evaluation/showhowto/RESULTS.md). Needs a backend that "
        "scores text (llama.cpp); others fold every copy."))
    split_steps: bool = option(True, help=(  # split_merged and step_splits.py say why and how
        "With --segmentation filtered, a step whose later clause (after a comma, \"and\" or \"then\") is said on "
        "a line of its own after the step's first, before the next step's, is cut there, in the model's words, "
        "where that line reads as a step's first line to the start probe and not as talk to the talk probe. The "
        "1.5B model writes brief actions said on consecutive lines as one step (blind set 36's tacos: \"Peel and "
        "dice two sweet potatoes, and toss them with oil, cumin, and salt.\"), and the second line had no step. "
        "On by default since blind set 37, where it found 79 of 98 true steps by line against 74, with 87 of 89 "
        "steps on a true step's line against 81 of 83; on the six hand-written transcripts 26 of 29 against 25, "
        "with 32 of 33 on a true step's line against 28 of 29 (evaluation/showhowto/RESULTS.md)."))
    marked_steps: bool = option(False, help=(  # marked_actions says why
        "With --segmentation filtered, where the model listed the narration and its copies of lines labelled MORE "
        "would be folded into the step before, a copied line that opens on a word that orders steps (\"now\", "
        "\"next\", \"then\", \"first\", \"after that\", past fillers and a correction) or on a condition clause "
        "(\"once it's dry,\") stays a step of its own, unless the talk probe reads it as talk. The 1.5B label pass "
        "reads such a line as going on with the step before (blind set 40: \"Then wipe the joints down with a damp "
        "sponge.\", \"Oh, no, sorry, first fill in around the sides\" folded away); on the spent truths 88% of "
        "the lines so opened are a true step's first line, against 42% of all lines. Off: on blind sets 42 and 43 "
        "the model listed no narration, so nothing was folded; on spent set 40 it kept eight copies and found 18 "
        "of 21 true steps against 14 (evaluation/showhowto/RESULTS.md)."))
    read_fold_targets: bool = option(False, help=(  # talk_targets says why
        "With --segmentation filtered, where the model listed the narration and its copies of lines labelled MORE "
        "would be folded into the step before, each step they would be folded into is first read by the talk "
        "probe (a linear reading of the sentence embedder, not the LLM); nothing is folded into one it reads as "
        "talk. The 1.5B model copies an aside as a step, the label pass can call it a step, and the brief action "
        "said next was folded into it (blind set 35's trivet: \"trim the last few corks to fit the gaps\" into "
        "\"This glue gun was six bucks and it's still going strong.\")."))
    drop_previews: bool = option(True, help=(  # step_summaries.py says why and how
        "With --segmentation filtered, a step said on a preview or a recap is dropped and listed in repairs: a "
        "line that names, in order, three or more of the steps said after it (the intro's plan) or before it (a "
        "recap), matched clause by clause by --text-model, with at most two steps on its other side."))
    skip_conditions: bool = option(False, help=(  # step_summaries.CONDITION says why
        "With --drop-previews, a clause that opens on a condition (\"once it's dry\", \"when that's cool\", \"if it "
        "squeaks\") names no step: it says when a step is done, and an action given with its precondition after a "
        "repeated action read as a recap (blind set 38's drywall: \"Once it's dry, sand it smooth ... and wipe off "
        "the dust.\"). Off: blind set 40, aimed at it, read no step so either way (evaluation/showhowto/RESULTS.md)."))
    reground_heads: bool = option(False, help=(  # step_splits.head_lines says why
        "With --split-steps, the head of a step that is cut starts on the line of its part it is said on best, "
        "where that is clearly better than its first line (the bar a cut is made by): the merged step was placed "
        "on its first line, which can be a false start the next line corrects (blind set 38's engine: \"check "
        "your owner's manual\" left on \"And then start pouring in the oil.\"). Off: blind set 40, aimed at it, had "
        "no cut made (evaluation/showhowto/RESULTS.md)."))
    text_model: str = option(DEFAULT_TEXT_EMBEDDING, help=(
        "Sentence embedder that places the steps on the lines they are said on (--grounding said): "
        "an alias from `vi models` (minilm-l6, mpnet-base) or a sentence-transformers folder."))
    prompt: Path | None = option(None, help=(
        "Your own prompt file (see the packaged prompt_templates/ for the format): with "
        "--segmentation labels it replaces extract_steps_write.txt and must use ${title} "
        "and ${steps}; with model or filtered, extract_steps.txt, using ${title} and ${transcript}."))
    max_new_tokens: int = option(1024, help="Longest reply, in tokens.")
    overlap_s: float = option(30.0, flag="--overlap", help=(  # context on each side of a chunk of a long transcript
        "Seconds of transcript shown on each side of a chunk, as context (a transcript longer "
        "than --n-ctx is cut into chunks)."))
    tolerance_s: float = option(2.0, flag="--tolerance", help=(  # clamped, not refused
        "Step times up to this many seconds outside the video are clamped; further out, "
        "the step is dropped."))
    template: ChatPrompt = internal(init=False)
    write_template: ChatPrompt = internal(init=False)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 64 or self.max_new_tokens >= self.n_ctx // 2:
            raise ValueError(f"--max-new-tokens must be between 64 and half of --n-ctx "
                             f"({self.n_ctx // 2}), got {self.max_new_tokens}")
        check_choices(self)
        if self.overlap_s < 0 or self.tolerance_s < 0:
            raise ValueError("--overlap and --tolerance must not be negative")
        if self.reads_text or self.line_probes or self.reads_opening:  # exit 5 first
            from vi.core.models.resolve import resolve

            if self.reads_text:
                resolve(self.text_model, "text-embedding")
            for kind in self.line_probes + (("talk",) if self.reads_opening else ()):
                resolve(load_line_probe(kind).embedder, "text-embedding")
        check_llm(self.llm_settings)  # a bad --device or --llm, a missing model or server: before any record
        object.__setattr__(self, "template", load_prompt(
            "extract_steps", self.prompt if self.segmentation != "labels" else None,
            needs=("title", "transcript")))
        object.__setattr__(self, "write_template", load_prompt(
            "extract_steps_write", self.prompt if self.segmentation == "labels" else None,
            needs=("title", "steps")))

    @property
    def grounds_by_text(self) -> bool:
        return self.segmentation == "filtered" and self.grounding == "said"

    @property
    def rest_after_said(self) -> bool:
        """Whether a full reply's steps end where their words are said (--rest-after said, where they are placed
        by their words), not where they are cited."""
        return self.ask_rest and self.rest_after == "said" and self.grounds_by_text

    @property
    def reads_previews(self) -> bool:
        return self.segmentation == "filtered" and self.drop_previews

    @property
    def reads_text(self) -> bool:
        """Whether --text-model is read: to place the steps, or to tell previews."""
        return self.grounds_by_text or self.reads_previews

    @property
    def line_probes(self) -> tuple[str, ...]:
        """The line probes (narration_probe.py) that read each line again, beside the label pass."""
        if self.segmentation not in ("filtered", "labels"):
            return ()
        return tuple(kind for kind, on in (("talk", self.talk_probe), ("start", self.start_probe)) if on)

    @property
    def reads_opening(self) -> bool:
        """Whether the talk probe reads each chunk's first line beside the label pass (narration_labels.
        labels_from_scores says why): with the label pass, unless --talk-probe reads every line already."""
        return self.segmentation in ("filtered", "labels") and not self.talk_probe

    def opening_talk(self, text: str) -> float:
        """The talk probe's log-odds that `text`, a chunk's first line, is talk."""
        return float(self.probe_readings([text], ("talk",))["talk"][0][0])

    def rereading(self, closing: bool) -> Rereading:
        """The lines of a chunk the talk probe reads again beside the label pass (`closing`: the chunk ends the
        video), from --opening, --closing, --after-talk and --after-more; none where it does not read openings."""
        if not self.reads_opening:
            return Rereading()
        return Rereading(self.opening_talk, until_step=self.opening == "until-step",
                         back_to_step=self.closing == "back-to-step" and closing,
                         after_talk=self.after_talk, after_more=self.after_more)

    def probe_readings(self, texts: list[str], kinds: tuple[str, ...] | None = None
                       ) -> dict[str, tuple[list[float], float]]:
        """Each line probe of `kinds` (default: those that are on): (its log-odds for each of `texts`, the label
        pass's weight beside them), as narration_probe.with_probes takes them; the texts are encoded once per
        embedder."""
        from vi.core.models.text_embedding import load_text_embedder

        vectors, out = {}, {}
        for kind in self.line_probes if kinds is None else kinds:
            probe = load_line_probe(kind)
            if probe.embedder not in vectors:
                embedder = load_text_embedder(probe.embedder, resolve_placement(self.device))
                vectors[probe.embedder] = embedder.encode(texts)
            out[kind] = (probe.log_odds(vectors[probe.embedder]), probe.llm_weight)
        return out

    def embed(self, texts: list[str]):
        """Unit-length sentence embeddings of `texts` (--text-model), loaded once per process."""
        from vi.core.models.text_embedding import load_text_embedder

        return load_text_embedder(self.text_model, resolve_placement(self.device)).encode(texts)


@dataclass(frozen=True)
class Chunk:
    core_start: float  # steps starting in [core_start, core_end) belong to this chunk
    core_end: float
    segments: list[Segment]


def plan_chunks(segments: list[Segment], line_tokens: Callable[[Segment], int], budget: int,
                overlap_s: float) -> list[Chunk]:
    """Cut `segments` into chunks whose lines fit `budget` tokens, context included."""
    if sum(line_tokens(s) for s in segments) <= budget:
        return [Chunk(-math.inf, math.inf, segments)]
    core_budget = max(1, int(budget * 0.6))  # the rest is for the overlap on both sides
    cores: list[list[Segment]] = [[]]
    used = 0
    for seg in segments:
        cost = line_tokens(seg)
        if cores[-1] and used + cost > core_budget:
            cores.append([])
            used = 0
        cores[-1].append(seg)
        used += cost
    chunks = []
    for i, core in enumerate(cores):
        first, last = core[0], core[-1]
        before = [s for s in segments if first.start - overlap_s <= s.start < first.start
                  and s not in core]
        after = [s for s in segments if last.start < s.start <= last.end + overlap_s
                 and s not in core]
        shown, spent = list(core), sum(line_tokens(s) for s in core)
        for seg in reversed(before):  # nearest context first, while it fits
            if spent + line_tokens(seg) > budget:
                break
            shown.insert(0, seg)
            spent += line_tokens(seg)
        for seg in after:
            if spent + line_tokens(seg) > budget:
                break
            shown.append(seg)
            spent += line_tokens(seg)
        core_start = -math.inf if i == 0 else first.start
        core_end = math.inf if i == len(cores) - 1 else cores[i + 1][0].start
        chunks.append(Chunk(core_start, core_end, shown))
    return chunks


def parse_reply(text: str, record_id: object) -> tuple[str, list[Any]]:
    try:
        reply = json.loads(text)
        return str(reply.get("title") or "").strip(), list(reply["steps"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError("llm_output_invalid", f"record {record_id}: the model's reply is not "
                          f"the steps JSON ({exc}); if it was cut off, raise --max-new-tokens: "
                          f"{text[:200]!r}") from None


def timed_steps(cited: list[tuple[int, int, str]], segments: list[Segment], indices: list[int],
                duration: float, tolerance: float, repairs: list[str]) -> list[dict]:
    """Items `{text, start, end, lines}`: start of the first cited line, end of the last one,
    inside the video; `lines` are indices into the record's transcript.segments."""
    items = []
    for first, last, text in cited:
        start, end = segments[first - 1].start, segments[last - 1].end
        if end < -tolerance or start > duration + tolerance:
            repairs.append(f"step {text!r}: its lines ({start:.2f}-{end:.2f} s) are outside the "
                           f"video (0-{duration:.2f} s), dropped")
            continue
        clamped = (min(max(start, 0.0), duration), min(max(end, 0.0), duration))
        if abs(clamped[0] - start) > 0.01 or abs(clamped[1] - end) > 0.01:
            repairs.append(f"step {text!r}: times clamped to the video")
        items.append({"text": text, "start": round(clamped[0], 2), "end": round(clamped[1], 2),
                      "lines": [indices[first - 1], indices[last - 1]]})
    return items


def speech_lines(record: dict) -> tuple[list[Segment], list[int]]:
    """The speech segments in time order, and the index of each in `transcript.segments`."""
    segments = speech_segments(record)  # checks the transcript
    raw = transcript_segments(record)
    order = sorted(range(len(raw)), key=lambda i: (float(raw[i]["start"]),  # as segments_of sorts
                                                   max(float(raw[i]["start"]), float(raw[i]["end"]))))
    indices = [i for i in order if is_speech(raw[i]["text"].strip())]
    return segments, indices


def owned_by(chunk: Chunk, step: Any, segments: list[Segment]) -> bool:
    """Whether `step` belongs to `chunk`: its first cited line starts in the chunk's core
    (a step citing no usable line is kept, for cited_steps to report)."""
    first = line_number(step.get("first_line")) if isinstance(step, dict) else None
    if first is None or not 1 <= first <= len(segments):
        return True
    return chunk.core_start <= segments[first - 1].start < chunk.core_end


def video_duration(record: dict, segments: list[Segment]) -> float:
    duration = finite_number(record.get("duration"))
    return duration if duration is not None and duration > 0 else max(s.end for s in segments)


@dataclass(frozen=True)
class RecordPlan:
    """One record ready for the model: its speech lines, numbered from 1 as the model cites them,
    cut into chunks that fit the prompt. Every segmentation walks the same chunks."""

    record_id: object
    title: str
    llm: Any
    segments: list[Segment]
    indices: list[int]  # each line's index in the record's transcript.segments
    chunks: list[Chunk]
    firsts: list[int]  # the number of each chunk's first line (a chunk's lines are consecutive)

    @property
    def texts(self) -> list[str]:
        return [s.text for s in self.segments]

    @property
    def names(self) -> SegmentNames:
        """How messages name a line: by its index in transcript.segments, as steps.items[].lines."""
        return SegmentNames(self.indices)

    def each_chunk(self, seed: int) -> Iterator[tuple[int, Chunk, int, int]]:
        """(n, chunk, its first line's number, its request seed) for each chunk, in order."""
        for n, (chunk, first) in enumerate(zip(self.chunks, self.firsts)):
            yield n, chunk, first, record_seed(seed, f"{self.record_id}#{n}") % 2**32


def plan_record(record: dict, config: ExtractConfig) -> RecordPlan:
    """The record's speech lines cut into chunks that fit the prompt; a record with no speech is a
    no_narration error, and one whose prompt leaves too little room a context_too_small error."""
    segments, indices = speech_lines(record)
    if not segments:
        raise RecordError("no_narration", f"record {record['id']}: the transcript has no speech "
                          "(empty, or only music/noise captions); no steps to extract. "
                          "vi filter-instructional --drop sets such videos aside")
    title = str(record.get("title") or NO_TITLE)
    llm = config.load_llm()
    overhead = llm.count_message_tokens(config.template.render(title=title, transcript=""))
    budget = min(llm.n_ctx, config.n_ctx) - overhead - config.max_new_tokens - SAFETY_TOKENS
    if budget < 100:
        raise RecordError("context_too_small", f"record {record['id']}: the prompt leaves "
                          f"{budget} tokens for the transcript; raise --n-ctx or shorten --prompt")
    number = {id(s): n for n, s in enumerate(segments, 1)}  # the line numbers the model cites
    line_tokens = {id(s): llm.count_tokens(numbered_lines([s], number[id(s)])[0]) + 1
                   for s in segments}
    longest = max(line_tokens.values())
    if longest > budget:
        raise RecordError("context_too_small", f"record {record['id']}: one transcript segment is "
                          f"{longest} tokens, more than the {budget} the prompt leaves in --n-ctx "
                          f"{config.n_ctx}; raise --n-ctx (or re-run vi transcribe, which cuts "
                          "segments at sentences)")
    chunks = plan_chunks(segments, lambda s: line_tokens[id(s)], budget, config.overlap_s)
    return RecordPlan(record["id"], title, llm, segments, indices, chunks,
                      [number[id(chunk.segments[0])] for chunk in chunks])


def ask_for_steps(plan: RecordPlan, config: ExtractConfig, chunk: Chunk, first: int, seed: int,
                  shown: list[dict] | None = None, notes: list[str] | None = None) -> tuple[str, list[Any]]:
    """The model's steps for the chunk (`extract_steps.txt`), only those that start in the chunk's
    core. With --grounding said (and the chunk's labels, `shown`) each step's lines are where its
    words are said (ground_chunk), and what moved is said in `notes`; otherwise its citation. A reply
    that holds MAX_STEPS steps and cites none of the chunk's later lines is said in `notes`, and with
    --ask-rest those lines are asked for again (steps_after_cap)."""
    notes = notes if notes is not None else []
    chunk_title, steps = steps_after_cap(plan, config, chunk, first, seed, notes, shown)
    if config.grounds_by_text and shown is not None:
        steps = ground_chunk(config, chunk, first, steps, shown, notes, plan.names)
    return chunk_title, [s for s in steps if owned_by(chunk, s, plan.segments)]


def steps_after_cap(plan: RecordPlan, config: ExtractConfig, chunk: Chunk, first: int, seed: int,
                    notes: list[str], shown: list[dict] | None = None) -> tuple[str, list[Any]]:
    """The model's steps for the chunk as cited. The reply's schema holds at most MAX_STEPS steps, and a model
    that lists the narration line by line reaches it halfway through a 30-line chunk (blind sets 27 and 28: the
    lemon curd's and the door's last steps cite segments 14 and 20 of 28 and 32), so the steps said after its
    last cited line are written by nobody. Where a reply is full and lines are left after its last citation, that is
    said in `notes`, and with --ask-rest those lines are asked for alone, as a chunk of their own, until a reply
    is not full or no line is left (each reply cites only later lines, so this ends). With --rest-after said
    (`shown`: the chunk's labels, for the grounding) the reply ends after the last line its steps' words are said
    on where that is later: the 1.5B model cites early, and a reply that reached the end in words is not asked
    to write its last lines again (blind set 30's risotto)."""
    messages = config.template.render(title=plan.title, transcript="\n".join(numbered_lines(chunk.segments, first)))
    reply = plan.llm.chat(messages, schema=steps_schema(list(range(first, first + len(chunk.segments)))),
                          max_tokens=config.max_new_tokens, seed=seed)
    chunk_title, steps = parse_reply(reply.text, plan.record_id)
    cited = [n for s in steps if isinstance(s, dict)
             for n in (line_number(s.get("first_line")), line_number(s.get("last_line"))) if n is not None]
    end = first + len(chunk.segments) - 1
    if len(steps) < MAX_STEPS or not cited or not first <= max(cited) < end:  # not full, or nothing left after it
        return chunk_title, steps
    last = max(cited)
    full = f"the model's reply holds {MAX_STEPS} steps, the most it may, the last on {plan.names(last, last)}"
    if not config.ask_rest:
        notes.append(f"{full}: {plan.names(last + 1, end)} got no step from it (--ask-rest asks again)")
        return chunk_title, steps
    if config.rest_after_said and shown is not None:
        # the 1.5B model cites early: where its steps' words are said later than it cites, they end there
        placed = ground_chunk(config, chunk, first, steps, shown, [], plan.names)
        said = max((s["last_line"] for s in placed if isinstance(s, dict) and s.get("fixed_lines")), default=last)
        if said >= end:
            notes.append(f"{full}, its steps' words said up to {plan.names(end, end)}: no line left to ask for")
            return chunk_title, steps
        if said > last:
            full, last = f"{full}, its words said up to {plan.names(said, said)}", said
    rest = Chunk(chunk.core_start, chunk.core_end, chunk.segments[last + 1 - first:])
    _, more = steps_after_cap(plan, config, rest, last + 1, seed, notes,
                              shown[last + 1 - first:] if shown is not None else None)
    notes.append(f"{full}: asked again for {plan.names(last + 1, end)}, {len(more)} steps")
    return chunk_title, steps + more


def step_probability(mark: dict) -> float:
    """P(STEP) of a labelled line: the label pass's own in process, else 1 or 0 by its label."""
    probs = mark.get("probs")
    return float(probs[0]) if probs else float(mark["label"] == "STEP")  # LABELS starts with STEP


def talk_probability(mark: dict) -> float:
    """P(TALK) of a labelled line: the label pass's own in process, else 1 or 0 by its label."""
    probs = mark.get("probs")
    return float(probs[-1]) if probs else float(mark["label"] == "TALK")  # LABELS ends with TALK


def ground_chunk(config: ExtractConfig, chunk: Chunk, first: int, steps: list[Any], shown: list[dict],
                 notes: list[str], names: SegmentNames = SegmentNames()) -> list[Any]:
    """The chunk's steps, each on the lines its text is said on (step_grounding.py): the steps in
    the model's order, its citation and the labels' P(TALK) as priors. Grounded steps are marked
    `fixed_lines` (cited_steps does not move them again); a step with no text is left for
    cited_steps to report."""
    lines = [s.text for s in chunk.segments]
    usable = [k for k, s in enumerate(steps) if isinstance(s, dict) and str(s.get("text") or "").strip()]
    if not usable:
        return steps

    def cited(step: dict) -> tuple[int, int] | None:
        a, b = line_number(step.get("first_line")), line_number(step.get("last_line"))
        a, b = (a, b) if a is not None and b is not None else (a or b, a or b)
        if a is None:
            return None
        clamp = lambda n: min(max(n - first + 1, 1), len(lines))  # noqa: E731 (chunk-local, 1-based)
        return tuple(sorted((clamp(a), clamp(b))))

    texts = [str(steps[k]["text"]).strip() for k in usable]
    grounded = ground_steps(texts, lines, [cited(steps[k]) for k in usable], config.embed,
                            [talk_probability(m) for m in shown])
    out = list(steps)
    for k, place in zip(usable, grounded):
        step, a, b = steps[k], first + place.first - 1, first + place.last - 1
        was = (line_number(step.get("first_line")), line_number(step.get("last_line")))
        if was != (a, b):
            cited_as = names(*was) if None not in was else "no line"
            notes.append(f"step {texts[usable.index(k)]!r}: cited {cited_as}, said on {names(a, b)} "
                         f"(similarity {place.similarity:.2f})")
        out[k] = {**step, "first_line": a, "last_line": b, "fixed_lines": True}
    return out


def label_chunk(plan: RecordPlan, config: ExtractConfig, chunk: Chunk, first: int, labels: dict[int, dict]
                ) -> list[dict]:
    """The label of each of the chunk's lines (narration_labels.py), decided again by the line probes
    (narration_probe.py) that are on; those of its core's lines are also added to
    `labels`, by line number."""
    texts = [s.text for s in chunk.segments]
    shown = label_lines(plan.llm, plan.title, texts, plan.record_id,
                        reread=config.rereading(closing=chunk is plan.chunks[-1]))
    if config.line_probes and read_by_likelihood(shown):  # a server's labels are left as they are
        shown = with_probes(shown, **config.probe_readings(texts))
    labels |= {first + i: mark for i, mark in enumerate(shown)
               if chunk.core_start <= chunk.segments[i].start < chunk.core_end}
    return shown


def labelled_runs(chunk: Chunk, first: int, shown: list[dict]) -> list[tuple[int, int]]:
    """The labelled steps of the chunk's core: a STEP line and the MORE lines after it (line numbers)."""
    return [(first + a, first + b) for a, b in step_runs([m["label"] for m in shown])
            if chunk.core_start <= chunk.segments[a].start < chunk.core_end]


def write_labelled_steps(plan: RecordPlan, config: ExtractConfig, chunk: Chunk, first: int,
                         shown: list[dict], seed: int, runs: list[tuple[int, int]] | None = None
                         ) -> tuple[str, list[dict]]:
    """The chunk's steps when the labels make them: a STEP line and the MORE lines after it, in
    the chunk's core (or only `runs`); the model writes one instruction for each
    (`extract_steps_write.txt`). The steps come back marked `fixed_lines`: their lines are the
    labels', not moved by snapping."""
    runs = labelled_runs(chunk, first, shown) if runs is None else runs
    if not runs:  # nothing but talk here: no step to write
        return "", []
    said = [" ".join(s.text for s in plan.segments[a - 1:b]) for a, b in runs]
    messages = config.write_template.render(title=plan.title, steps="\n".join(
        f"Step {k} (lines {a}-{b}): {words}" for k, ((a, b), words) in enumerate(zip(runs, said), 1)))
    reply = plan.llm.chat(messages, schema=labelled_steps_schema(runs, said), max_tokens=config.max_new_tokens,
                          seed=seed)
    chunk_title, steps = parse_reply(reply.text, plan.record_id)
    return chunk_title, [{**s, "fixed_lines": True} if isinstance(s, dict) else s for s in steps]


def step_order(step: Any) -> tuple[int, int]:
    """Sort key: a step's cited lines (a step citing none sorts last)."""
    if not isinstance(step, dict):
        return (1 << 30, 1 << 30)
    a, b = line_number(step.get("first_line")), line_number(step.get("last_line"))
    return (a if a is not None else 1 << 30, b if b is not None else 1 << 30)


def missed_runs(runs: list[tuple[int, int]], steps: list[Any], labels: dict[int, str]) -> list[tuple[int, int]]:
    """The labelled runs that no step of the model's touches (a step on talk lines only touches
    nothing: it will be dropped)."""
    taken = set()
    for step in steps:
        if not isinstance(step, dict) or not str(step.get("text") or "").strip():
            continue
        a, b = line_number(step.get("first_line")), line_number(step.get("last_line"))
        if a is None or b is None:
            continue
        a, b = min(a, b), max(a, b)
        if not all(labels.get(n) == "TALK" for n in range(a, b + 1)):
            taken |= set(range(a, b + 1))
    return [(a, b) for a, b in runs if not taken & set(range(a, b + 1))]


@cache
def screening(settings: LLMSettings) -> FilterConfig:
    """vi filter-instructional's config on the stage's own LLM (loaded once, shared), built the
    first time a record needs it: its start-up check would only repeat ExtractConfig's (for a
    server, one more request before any record)."""
    return FilterConfig(llm=settings.spec, n_ctx=settings.n_ctx, device=settings.device, seed=settings.seed,
                        threads=settings.threads, concurrency=settings.concurrency)


def screen_record(record: dict, config: ExtractConfig, copied: str) -> dict:
    """vi filter-instructional's verdict on a record the model answered with its narration lines
    (`copied` says how many): a model that finds no steps to write may be right, as on a vlog whose
    lines about the day read as steps to the labels. Asked only then, and only of a record the
    filter has not labelled, so a how-to costs nothing more. A No is a not_instructional error."""
    verdict = classify(record, screening(config.llm_settings))["instructional"]
    if verdict["label"] is False:
        raise RecordError("not_instructional", f"record {record['id']}: the model answered with the "
                          f"narration lines instead of steps ({copied} copied word for word), and asked "
                          f"vi filter-instructional's question it said the video teaches no task "
                          f"({verdict['reason']}); vi filter-instructional --drop sets such videos aside")
    return verdict


def refuse_all_talk(record_id: object, labels: dict[int, dict]) -> None:
    if labels and all(mark["label"] == "TALK" for mark in labels.values()):
        raise RecordError("no_steps", f"record {record_id}: every narration line was labelled "
                          "TALK (a greeting, an aside, an opinion...): the video teaches no task. "
                          "vi filter-instructional sets such videos aside")


def steps_output(record: dict, config: ExtractConfig, plan: RecordPlan, titles: list[str],
                 cited: list[tuple[int, int, str]], repairs: list[str], labels: dict[int, dict],
                 remarks: str | None = None) -> dict:
    """The record's `steps`: the cited steps timed, or a no_steps error where none is usable. `remarks`:
    "scored" where --drop-remarks scored the steps' texts (step_remarks.py), else None."""
    items = timed_steps(cited, plan.segments, plan.indices, video_duration(record, plan.segments),
                        config.tolerance_s, repairs)
    if not items:
        why = "; ".join(repairs) or ("it listed none: does the video teach a task? "
                                     "vi filter-instructional sets aside those that do not")
        raise RecordError("no_steps", f"record {record['id']}: no usable step in the model's "
                          f"reply ({why})")
    extra = {}
    if labels:  # one label per transcript segment (null: not speech), for reading the steps
        line_labels: list[str | None] = [None] * len(transcript_segments(record))
        for line, mark in labels.items():
            line_labels[plan.indices[line - 1]] = mark["label"]
        extra["line_labels"] = line_labels
    previews = "dropped" if config.drop_previews else "kept"
    read_requests = config.read_requests and remarks == "scored"  # false where nothing was scored
    method = {"grounding": config.grounding, "remarks": remarks, "previews": previews, "read_requests": read_requests,
              # whether only steps naming the video's page or channel were read against the request
              "requests_name_the_page": read_requests and config.requests_name_the_page,
              # whether a copied talk line was read before the copies were folded (a server scores nothing)
              "read_listed_talk": config.read_listed_talk and gives_likelihoods(plan.llm),
              "read_folds": config.read_folds and gives_likelihoods(plan.llm),  # whether the copies were read first
              "marked_steps": config.marked_steps,  # whether copies opening as a step's first line were kept
              "read_fold_targets": config.read_fold_targets,  # whether the steps copies go into were read first
              "split_steps": config.split_steps,  # whether merged steps were cut where their clauses are said
              "reground_heads": config.split_steps and config.reground_heads,  # whether a cut's head was placed again
              "skip_conditions": config.drop_previews and config.skip_conditions,  # whether conditions named no step
              } if config.segmentation == "filtered" else {}
    if config.segmentation != "labels":  # the model writes its own steps, up to MAX_STEPS a reply
        method["ask_rest"] = config.ask_rest
        method["rest_after"] = ("said" if config.rest_after_said else "cited") if config.ask_rest else None
    if config.segmentation != "model":  # the second readings of each line, by their embedder (null: the labels alone)
        scored = read_by_likelihood(labels.values())  # a server's labels: no probe read them
        method |= {f"{kind}_probe": load_line_probe(kind).embedder if scored and kind in config.line_probes else None
                   for kind in ("talk", "start")}
        method["opening_probe"] = load_line_probe("talk").embedder if scored and config.reads_opening else None
        method["opening"] = config.opening if method["opening_probe"] else None
        method["closing"] = config.closing if method["opening_probe"] else None
        method["after_talk"] = config.after_talk if method["opening_probe"] else None
        method["after_more"] = config.after_more if method["opening_probe"] else None
    return {"steps": {"title": next((t for t in titles if t), plan.title), "items": items,
                      "model": config.llm, "segmentation": config.segmentation, **method,
                      "chunks": len(plan.chunks), "repairs": repairs, **extra}}


# --- one function per segmentation (see the module's docstring) ------------------------------------

def model_steps(record: dict, config: ExtractConfig, plan: RecordPlan) -> dict:
    """--segmentation model: the model's citations, moved onto the lines their words come from
    (snap_to_lines) and checked; no label pass."""
    titles, raw, notes = [], [], []
    for _, chunk, first, seed in plan.each_chunk(config.seed):
        chunk_title, steps = ask_for_steps(plan, config, chunk, first, seed, notes=notes)
        titles.append(chunk_title)
        raw += steps
    cited, repairs = cited_steps(raw, len(plan.segments), plan.texts, plan.names)
    repairs[:0] = notes
    return steps_output(record, config, plan, titles, cited, repairs, {})


def labelled_steps(record: dict, config: ExtractConfig, plan: RecordPlan) -> dict:
    """--segmentation labels: the labels make the steps and the model writes one instruction for
    each; the labels' lines are kept as they are (no snapping)."""
    titles, raw, labels = [], [], {}
    for _, chunk, first, seed in plan.each_chunk(config.seed):
        shown = label_chunk(plan, config, chunk, first, labels)
        chunk_title, steps = write_labelled_steps(plan, config, chunk, first, shown, seed)
        titles.append(chunk_title)
        raw += steps
    refuse_all_talk(plan.record_id, labels)
    cited, repairs = cited_steps(raw, len(plan.segments), None, plan.names)
    return steps_output(record, config, plan, titles, cited, repairs, labels)


def listed_talk(plan: RecordPlan, config: ExtractConfig, steps: list, labels: dict[int, str], notes: list[str]
                ) -> bool:
    """Whether the model's steps copy a line labelled TALK from between them: it listed the narration, talk
    and all. With --read-listed-talk a copied line that reads as an action by more than the remark margin
    does not count: the label is wrong there (a brief "chill at least one hour" called talk), and taking a
    clean clip's copied actions as a listing folds its steps into one another by their MORE labels."""
    lines = copied_talk_lines(steps, labels, plan.texts)
    if not (lines and config.read_listed_talk):
        return bool(lines)
    scores = instruction_scores(plan.llm, plan.title, [plan.texts[n - 1] for n in lines])
    if scores is None:
        return True
    actions = [(n, score) for n, score in zip(lines, scores, strict=True) if score > REMARK_MARGIN]
    if len(actions) < len(lines):
        return True
    notes += [f"{plan.names(n)}: labelled talk and copied as a step, but reads as an action ({score:+.1f} nats "
              "as an action against as a remark): not taken as the narration listed" for n, score in actions]
    return False


def fold_readings(plan: RecordPlan, config: ExtractConfig, steps: list, labels: dict[int, str], notes: list[str]
                  ) -> dict[str, frozenset]:
    """What is read before the copies are folded (--read-folds, --read-fold-targets), as fold_copies' `keep` and
    `talk`. The copies the fold would fold, and the steps it would fold them into, are found by the fold
    itself: a run whose notes are thrown away."""
    folded: list[tuple[int, str]] = []
    if config.read_folds or config.read_fold_targets or config.marked_steps:
        fold_copies(steps, labels, plan.texts, [], plan.names, folded=folded)
    lines = [n for n, _ in folded]
    marked = marked_actions(plan, config, lines, notes)
    return {"keep": marked | own_actions(plan, config, [n for n in lines if n not in marked], notes),
            "talk": talk_targets(plan, config, [text for _, text in folded], notes)}


def marked_actions(plan: RecordPlan, config: ExtractConfig, lines: list[int], notes: list[str]) -> frozenset[int]:
    """With --marked-steps, the lines labelled MORE whose copies the fold would fold (`lines`) that open on a word
    that orders steps or on a condition clause (step_citations.STEP_OPENING) and that the talk probe does not read
    as talk (log-odds below 0): fold_copies keeps them as steps. The label pass reads "then ...", "once it's dry,
    ..." and a correction's "oh, no, first ..." as going on with the step before, and --read-folds' reading of a
    copy as an action against a detail of that step shares the LLM's lean (blind set 40's tile: "Then wipe the
    joints down with a damp sponge." and "Now load up the float ..." folded all the same). The opening word is a
    reading the LLM has no part in; the probe keeps "Now, I know what you're thinking" a fold."""
    opened = [n for n in lines if opens_a_step(plan.texts[n - 1])] if config.marked_steps else []
    if not opened:
        return frozenset()
    said = config.probe_readings([plan.texts[n - 1] for n in opened], ("talk",))["talk"][0]
    kept = [(n, odds) for n, odds in zip(opened, said, strict=True) if odds < 0.0]
    notes += [f"{plan.names(n)}: labelled MORE and copied as a step, but opens as a step's first line does and "
              f"does not read as talk (talk probe log-odds {odds:+.1f}): not folded" for n, odds in kept]
    return frozenset(n for n, _ in kept)


def own_actions(plan: RecordPlan, config: ExtractConfig, lines: list[int], notes: list[str]) -> frozenset[int]:
    """With --read-folds, the lines labelled MORE whose copies (the fold would fold `lines`) read as actions of
    their own by more than the remark margin against a detail of the step before: fold_copies keeps them as
    steps. Where the model listed the narration the labels say where a step ends, but the 1.5B label pass calls
    a run of brief actions MORE ("drain them and rinse with cold water", "slice up a cucumber and some green
    onions" after "now drop the noodles in"), and folded by those labels they were one step; an amount or a
    time said after its action ("eight ounces of rice noodles for about six minutes") reads as a detail and is
    still folded."""
    scores = detail_scores(plan.llm, plan.title, [plan.texts[n - 1] for n in lines]) \
        if config.read_folds and lines else None
    if scores is None:
        return frozenset()
    actions = [(n, score) for n, score in zip(lines, scores, strict=True) if score > REMARK_MARGIN]
    notes += [f"{plan.names(n)}: labelled MORE and copied as a step, but reads as an action of its own ({score:+.1f} "
              "nats as an action against as a detail of the step before): not folded" for n, score in actions]
    return frozenset(n for n, _ in actions)


def talk_targets(plan: RecordPlan, config: ExtractConfig, targets: list[str], notes: list[str]) -> frozenset[str]:
    """With --read-fold-targets, the texts of the steps copies would be folded into (`targets`) that the talk probe
    reads as talk (log-odds above 0, its own reading: the label pass's is the one that let the step through):
    fold_copies folds nothing into them. Where the 1.5B model lists the narration it copies an aside as a step,
    and the label pass can call the aside a step; the brief action said next, labelled MORE, was folded into it
    and lost (the aside's step copies one line and is placed there alone). Blind set 35's trivet: "trim the last
    few corks to fit the gaps" into "This glue gun was six bucks and it's still going strong.". The LLM's own
    readings share its lean: the remark filter read that aside -0.3 nats and the action after it -0.2, where the
    probe, a linear reading of the sentence embedder, read +2.4 and -1.8."""
    texts = list(dict.fromkeys(targets)) if config.read_fold_targets else []
    if not texts:
        return frozenset()
    said = config.probe_readings(texts, ("talk",))["talk"][0]
    talk = [(text, odds) for text, odds in zip(texts, said, strict=True) if odds > 0.0]
    notes += [f"step {text.strip()!r} reads as talk to the talk probe (log-odds {odds:+.1f}): the copies labelled MORE "
              "after it are not folded into it" for text, odds in talk]
    return frozenset(text for text, _ in talk)


def split_merged(plan: RecordPlan, config: ExtractConfig, steps: list[tuple[int, int, str]], labels: dict[int, str],
                 repairs: list[str]) -> list[tuple[int, int, str]]:
    """With --split-steps, `steps` with each step the model merged cut where its later clause is said
    (step_splits.py says how), where that line reads as a step's first line to the start probe and not as talk
    to the talk probe (log-odds above and below 0: the probes alone, as the label pass calls such lines MORE).
    The embedder that finds a cut cannot tell a second action from a detail said after the first ("about a
    quarter inch thick"), and the LLM's reading of the tail as an action against a detail did not part them
    either (spent sets 27-35: details read up to +5.7 nats as actions, true steps from +0.6)."""
    cuts = find_cuts(steps, plan.texts, labels, config.embed)
    if not cuts:
        return steps
    said = config.probe_readings([plan.texts[cut.line - 1] for cut in cuts], ("start", "talk"))
    kept = [start > 0.0 and talk < 0.0 for start, talk in zip(said["start"][0], said["talk"][0], strict=True)]
    for cut, keep, start, talk in zip(cuts, kept, said["start"][0], said["talk"][0], strict=True):
        verdict = "cut there" if keep else "not cut"
        repairs.append(f"step {steps[cut.step][2]!r}: {cut.tail!r} is said on {plan.names(cut.line)} (similarity "
                       f"{cut.match:.2f}, {cut.before:.2f} on {plan.names(cut.first)}), which reads as a step's first "
                       f"line {start:+.1f} and as talk {talk:+.1f} (the probes' log-odds): {verdict}")
    heads = head_lines(steps, cuts, kept, plan.texts, config.embed) if config.reground_heads else {}
    repairs += [f"step {steps[step][2]!r}: cut, and its head is said on {plan.names(line)}, not on "
                f"{plan.names(steps[step][0])}: it starts there" for step, line in heads.items()]
    return apply_cuts(steps, cuts, kept, heads)


def filtered_steps(record: dict, config: ExtractConfig, plan: RecordPlan) -> dict:
    """--segmentation filtered: the model's steps, each placed where its words are said
    (--grounding said), those on TALK lines only dropped; the labelled runs no step of the model's
    touches are written as steps too (one more request where there are any); a step that copies a
    line the labels say goes on with the step above is folded into it. A model that mostly copied
    lines makes the stage ask filter-instructional's question first, where the record was not
    screened (a vlog's lines copied as steps)."""
    verdict = record.get("instructional")  # vi filter-instructional's, or the one screen_record asks
    titles, raw, labels, notes = [], [], {}, []
    for n, chunk, first, seed in plan.each_chunk(config.seed):
        shown = label_chunk(plan, config, chunk, first, labels)
        if all(m["label"] == "TALK" for m in shown):
            continue  # no step of this chunk could survive the filter: no request
        chunk_title, steps = ask_for_steps(plan, config, chunk, first, seed, shown, notes)
        chunk_labels = {first + i: m["label"] for i, m in enumerate(shown)}
        copied, counted = copied_steps(steps, chunk_labels, plan.texts)
        mostly_copied = bool(counted) and copied / counted > COPY_SHARE
        if mostly_copied and copies_talk(steps, chunk_labels, plan.texts, anywhere=True):
            # the model copied lines, talk among them: is there a task at all (asked where the
            # record was not screened; a vlog's lines about the day are copied, its greeting too)?
            if not isinstance(verdict, dict):
                verdict = screen_record(record, config, f"{copied} of its {counted} steps")
        if mostly_copied and listed_talk(plan, config, steps, chunk_labels, notes):
            # it listed the lines, talk from between the steps too: the labels say where a step ends
            notes.append(f"chunk {n + 1}: {copied} of the model's {counted} steps on non-talk lines were "
                         "narration lines copied word for word, talk among its steps too (it listed the "
                         "lines): copies of lines labelled MORE are folded into the step before")
            steps = sorted(steps, key=step_order)
            steps = fold_copies(steps, chunk_labels, plan.texts, notes, plan.names,
                                **fold_readings(plan, config, steps, chunk_labels, notes))
        missed = [(a, b) for a, b in missed_runs(labelled_runs(chunk, first, shown), steps, chunk_labels)
                  if step_probability(shown[a - first]) >= STEP_SURE]
        if missed:
            _, written = write_labelled_steps(plan, config, chunk, first, shown, seed, missed)
            notes += [f"{plan.names(a, b)}: labelled a step that none of the model's steps is on; written "
                      "from what was said there" for a, b in missed]
            steps = sorted(steps + written, key=step_order)  # in place, not a reordering to report
        titles.append(chunk_title)
        raw += steps
    refuse_all_talk(plan.record_id, labels)
    cited, repairs = cited_steps(raw, len(plan.segments), plan.texts, plan.names)
    repairs[:0] = notes
    by_line = {line: mark["label"] for line, mark in labels.items()}
    kept = drop_talk(cited, by_line, repairs, plan.names)
    if config.split_steps and kept:
        kept = split_merged(plan, config, kept, by_line, repairs)
    remarks = None
    if config.drop_remarks and kept:
        readings = step_readings(plan.llm, plan.title, [text for _, _, text in kept], config.read_requests,
                                 config.requests_name_the_page)
        if readings is not None:
            kept, remarks = drop_remarks(kept, readings, repairs, plan.names), "scored"
    if config.reads_previews and kept:  # last: a preview is told by the steps that stay
        kept = drop_summaries(kept, plan.texts, config.embed, repairs, plan.names, config.skip_conditions)
    if cited and not kept:
        raise RecordError("no_steps", f"record {record['id']}: every step the model gave cites only lines "
                          "labelled TALK (a greeting, an aside, an opinion...) or reads as a remark: the video "
                          f"teaches no task ({'; '.join(repairs)}). vi filter-instructional sets such videos aside")
    return steps_output(record, config, plan, titles, kept, repairs, labels, remarks)


STEPS_BY_SEGMENTATION = {"filtered": filtered_steps, "labels": labelled_steps, "model": model_steps}
assert set(STEPS_BY_SEGMENTATION) == set(SEGMENTATIONS)  # ExtractConfig checks --segmentation against these


def extract(record: dict, config: ExtractConfig) -> dict:
    verdict = record.get("instructional")
    if isinstance(verdict, dict) and verdict.get("label") is False:  # costs no request
        raise RecordError("not_instructional", f"record {record['id']}: vi filter-instructional labelled "
                          f"it not instructional ({verdict.get('reason') or 'no reason given'}), so it has "
                          "no steps to extract; vi filter-instructional --drop sets such records aside")
    return STEPS_BY_SEGMENTATION[config.segmentation](record, config, plan_record(record, config))


EXTRACT_STEPS = RecordStage(
    STAGE,
    reads="[cyan]transcript[/cyan], and [cyan]title[/cyan], [cyan]duration[/cyan] and "
          "[cyan]instructional[/cyan] when present (a record vi filter-instructional labelled "
          "false is a not_instructional error record, at no model cost).",
    writes="[cyan]steps[/cyan] = {title, items: [{text, start, end, lines}], model, segmentation, "
           "grounding, remarks, previews, read_requests, requests_name_the_page, read_listed_talk, read_folds, "
           "marked_steps, "
           "read_fold_targets, split_steps, reground_heads, skip_conditions, ask_rest, rest_after, "
           "talk_probe, "
           "start_probe, opening_probe, opening, closing, after_talk, after_more, chunks, repairs, line_labels}: "
           "each step's "
           "first and last transcript line, where "
           "its words are said (--grounding said) or as the model cited them, and its times are those "
           "lines' ([cyan]lines[/cyan]: their indices in transcript.segments, from 0; repairs say 'segment N' "
           "alike); in temporal order; "
           "[cyan]line_labels[/cyan] gives each segment's "
           "STEP/MORE/TALK label (null: not speech); [cyan]repairs[/cyan] lists what was fixed in "
           "the model's reply.",
    example="vi filter-instructional --drop --rejects no.jsonl -i t.jsonl | vi extract-steps | "
            "vi align-frames",
    config=ExtractConfig, fields=("steps",), process=extract)
