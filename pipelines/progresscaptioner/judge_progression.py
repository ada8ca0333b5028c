"""`vi judge progression`: do adjacent frame captions describe a change? (ProgressCaptioner, Sec. 3)

For each adjacent frame pair (i, i+1) of a sequence, every judge LLM (`--llm`, repeatable) reads the
two captions of every captioner (each caption field, `captions` or `captions_*`) and answers with one
letter of the paper's prompt:
- pseudo (pseudo-labelling): A = the images look similar, B = noticeable changes, C = cannot tell;
- eval (FrameCapEval): A = the action progressed, B = no action progression, C = uncertain.
The reply is constrained to the JSON schema {"answer": "A"|"B"|"C"}: llama.cpp compiles it into a
grammar, a server gets it as response_format, transformers validates and asks again. A backend that
still answers something else is asked again with what was wrong (`chat.chat_json`, 3 asks in all);
after that the record becomes an `llm_output_invalid` error naming the pair, captioner and judge.

Votes, per pair (the paper: "the majority vote across all LLMs' judgements of all K caption pairs"):
- consensus: the letter most frequent among every judge's answer on every captioner's pair; a tie for
  the most frequent letter gives null (no consensus);
- change: the consensus as a label, `letter_to_change`: pseudo B -> true, A -> false; eval A -> true,
  B -> false; C or null -> null;
- passed[captioner]: its own majority (over the judges, ties -> none) is the consensus letter and the
  consensus says change true or false. A captioner whose pair only lets the judges say "cannot tell" (C),
  or a pair without consensus, does not pass: there is nothing decisive to agree with.
- distinct (the M visually distinct frames for caption matching): the first frame, plus frame i+1 for
  every adjacent pair (i, i+1) whose change is true. Only adjacent pairs are judged, as in the paper, so a
  frame that drifts away from the last kept one in small unjudged steps is not kept; a pair with change
  null counts as no change (only positive evidence keeps a frame). Under --prompt eval, "change" is
  "the action progressed".
A captioner without a caption for one of a pair's frames gets answers null and passed false on that
pair (its judges are not asked). The eval prompt needs the action: the record's `action` (else
FrameCapEval's `action_label`); without one the prompt says NO_ACTION and `progression.action` is null.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from vi.core.config import internal, option, with_default
from vi.core.errors import RecordError
from vi.core.models.catalog import DEFAULT_LLM
from vi.core.models.chat import (LLM_HELP, LLM_PANEL, SCHEMA_RETRIES, ChatBackend, LLMConfig, LLMSettings,
                                 chat_json, check_llm, load_llm)
from vi.core.seeding import record_seed
from vi.core.stream import RecordStage
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt

STAGE = "judge-progression"
PROMPTS = {"pseudo": "progression_pseudo", "eval": "progression_eval"}
NEEDS = {"pseudo": ("desc1", "desc2"), "eval": ("action", "desc1", "desc2")}
LETTERS = ("A", "B", "C")
ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": list(LETTERS)}},
                 "required": ["answer"]}
MAX_TOKENS = 16  # {"answer": "B"} is about 7 tokens; a grammar stops the model there
NO_ACTION = "the action shown in the images"
CHANGE = {"pseudo": {"A": False, "B": True}, "eval": {"A": True, "B": False}}


def letter_to_change(letter: str | None, prompt: str) -> bool | None:
    """True when the letter says the frames differ (pseudo B) or the action advanced (eval A); False for
    the opposite; None for C (cannot tell) or no letter."""
    if prompt not in CHANGE:
        raise ValueError(f"prompt must be one of {', '.join(CHANGE)}, got {prompt!r}")
    return CHANGE[prompt].get(letter) if letter is not None else None


@functools.lru_cache(maxsize=None)
def packaged_prompt(prompt: str) -> ChatPrompt:
    if prompt not in PROMPTS:
        raise ValueError(f"--prompt must be one of {', '.join(PROMPTS)}, got {prompt!r}")
    return load_prompt(PROMPTS[prompt], None, needs=NEEDS[prompt])


def parse_letter(text: str, letters: tuple[str, ...] | list[str] = LETTERS) -> str | None:
    """The letter of a reply {"answer": LETTER} (A, B or C unless `letters` says); None for anything else."""
    try:
        answer = json.loads(text).get("answer")
    except (ValueError, AttributeError):
        return None
    return answer if answer in letters else None


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def judge_pair(llm: ChatBackend, desc1: str, desc2: str, *, prompt: str = "pseudo", action: str | None = None,
               seed: int = 0, template: ChatPrompt | None = None, where: str = "") -> str:
    """One judge's letter (A, B or C) for two captions; `template` replaces the packaged prompt.

    Raises RecordError (`context_too_small`, `llm_output_invalid`); `where` starts its message."""
    template = template or packaged_prompt(prompt)
    values = {"desc1": one_line(desc1), "desc2": one_line(desc2)}
    if prompt == "eval":
        values["action"] = one_line(action) if action else NO_ACTION
    messages = template.render(**values)
    if llm.count_message_tokens(messages) + MAX_TOKENS > llm.n_ctx:
        raise RecordError("context_too_small", f"{where}the captions and the prompt do not fit the judge's "
                          f"context of {llm.n_ctx} tokens; raise --n-ctx")
    reply = chat_json(functools.partial(llm.chat, schema=ANSWER_SCHEMA), messages, ANSWER_SCHEMA,
                      max_tokens=MAX_TOKENS, temperature=0.0, seed=seed)
    letter = parse_letter(reply.text)
    if letter is None:
        raise RecordError("llm_output_invalid", f"{where}the judge answered {reply.text[:200]!r}, not "
                          f'{{"answer": "A"|"B"|"C"}}, {SCHEMA_RETRIES + 1} times; use a backend that '
                          "constrains its replies (llama.cpp, a server with json_schema) or another model")
    return letter


def majority(letters: list[str]) -> str | None:
    """The most frequent letter; None when there is none or two letters tie for the most."""
    counts = Counter(letters).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


# --- the record -------------------------------------------------------------------------------------------

def holds_captions(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("items"), list)


def is_caption_field(name: str, value: object) -> bool:
    return (name == "captions" or name.startswith("captions_")) and holds_captions(value)


def caption_fields(record: dict, requested: tuple[str, ...]) -> list[str]:
    """The caption fields to judge: those asked for (each must be there), else every captions/captions_*."""
    for name in requested:
        if not holds_captions(record.get(name)):
            raise RecordError("missing_field", f"record {record['id']}: no caption field '{name}' ({{model, items: "
                              f"[{{frame, text}}]}} from vi caption-frames --into {name}); caption the frames "
                              "first, or name the fields the records have with --captions")
    found = list(requested) or [k for k, v in record.items() if is_caption_field(k, v)]
    if not found:
        raise RecordError("missing_field", f"record {record['id']}: no 'captions' field (nor captions_*) holding "
                          "{model, items: [{frame, text}]}; run vi caption-frames first")
    return found


def _items(record: dict, name: str) -> list[dict]:
    """The usable items of a caption field: an int frame >= 0 and a non-empty text."""
    return [item for item in record[name]["items"] if isinstance(item, dict)
            and isinstance(item.get("frame"), int) and not isinstance(item["frame"], bool) and item["frame"] >= 0
            and isinstance(item.get("text"), str) and item["text"].strip()]


def frame_texts(record: dict, name: str) -> dict[int, str]:
    """Frame index -> caption for one caption field; a frame's first item is its caption (vi caption-frames
    puts the other windows' captions of a frame, --keep-both, after it)."""
    out: dict[int, str] = {}
    for item in _items(record, name):
        out.setdefault(item["frame"], item["text"])
    return out


def pair_texts(record: dict, name: str, first: dict[int, str], i: int) -> tuple[str, str] | None:
    """The captions of frames i and i+1: those of the 2-frame window (v_i, v_i+1) when the items say so
    (`from`, vi caption-frames --window 2 --keep-both: the paper's stage-I caption pairs), else each frame's
    first caption; None when one is missing."""
    window = {item["frame"]: item["text"] for item in _items(record, name) if item.get("from") == [i, i + 1]}
    if i in window and i + 1 in window:
        return window[i], window[i + 1]
    return (first[i], first[i + 1]) if i in first and i + 1 in first else None


def frame_count(record: dict, texts: dict[str, dict[int, str]]) -> int:
    frames = record.get("frames")
    if isinstance(frames, list) and frames:
        return len(frames)
    return 1 + max((f for t in texts.values() for f in t), default=-1)


def record_action(record: dict) -> str | None:
    for key in ("action", "action_label"):
        if isinstance(record.get(key), str) and record[key].strip():
            return record[key].strip()
    return None


def caption_list(text: str | None) -> tuple[str, ...]:
    """--captions FIELD[,FIELD] as a tuple of field names (none: every caption field)."""
    return tuple(name.strip() for name in (text or "").split(",") if name.strip())


@dataclass(frozen=True, kw_only=True)
class ProgressionConfig:
    """The options of `vi judge progression`, checked when built (a bad one: exit 2; a missing model: exit 5).
    Several judges vote, so `llms` is a list (--llm repeated) and this is not an LLMConfig; the other LLM
    options are LLMConfig's."""

    llms: tuple[str, ...] = option(
        (DEFAULT_LLM,), flag="--llm", panel=LLM_PANEL, show_default=False,
        help=LLM_HELP + f" Repeat --llm for several judges (they vote); default {DEFAULT_LLM}.")
    prompt: str = option("pseudo", help=(
        "pseudo: the paper's pseudo-labelling prompt (A similar, B changed, C cannot tell); eval: "
        "FrameCapEval's (A action progressed, B not, C uncertain; it names the record's action)."))
    prompt_file: Path | None = option(None, help=(
        "Your own prompt instead of the packaged progression_pseudo.txt / progression_eval.txt; it must "
        "use ${desc1} and ${desc2} (and ${action} with --prompt eval) and ask for A, B or C."))
    captions: tuple[str, ...] = option(
        (), metavar="FIELD[,FIELD]", cli_type=Optional[str], cli_default=None, parse=caption_list,
        help="The caption fields to judge (vi caption-frames --into), comma-separated; default: every field "
             "named captions or captions_* that holds {items: [{frame, text}]}.")
    n_ctx: int = with_default(LLMConfig, "n_ctx", 2048)
    device: str = "auto"
    seed: int = 0
    threads: int | None = with_default(LLMConfig, "threads", None)
    concurrency: int = with_default(LLMConfig, "concurrency", 1)
    template: ChatPrompt = internal(init=False)

    def __post_init__(self) -> None:
        if not self.llms:
            raise ValueError("give at least one judge with --llm")
        repeated = [ref for ref, n in Counter(self.llms).items() if n > 1]
        if repeated:
            raise ValueError(f"--llm {repeated[0]} is given twice: one vote per judge")
        if self.prompt not in PROMPTS:
            raise ValueError(f"--prompt must be one of {', '.join(PROMPTS)}, got {self.prompt!r}")
        for ref in self.llms:  # a bad spec or a missing model: before any record
            check_llm(self.settings(ref))
        object.__setattr__(self, "template", load_prompt(PROMPTS[self.prompt], self.prompt_file,
                                                         needs=NEEDS[self.prompt]))

    def settings(self, ref: str) -> LLMSettings:
        return LLMSettings(ref, n_ctx=self.n_ctx, device=self.device, seed=self.seed, threads=self.threads,
                           concurrency=self.concurrency)

    def judges(self) -> list[tuple[str, ChatBackend]]:
        return [(ref, load_llm(self.settings(ref))) for ref in self.llms]


def vote(answers: dict[str, dict[str, str] | None], prompt: str, first: int) -> dict:
    """One pair's entry: its answers, consensus, change and per-captioner pass."""
    every = [letter for judged in answers.values() if judged for letter in judged.values()]
    consensus = majority(every)
    change = letter_to_change(consensus, prompt)
    passed = {name: bool(judged) and change is not None and majority(list(judged.values())) == consensus
              for name, judged in answers.items()}
    return {"frames": [first, first + 1], "answers": answers, "consensus": consensus, "change": change,
            "passed": passed}


def distinct_frames(pairs: list[dict]) -> list[int]:
    """Frame 0 and every frame whose pair with the frame before it shows change true."""
    return [0] + [p["frames"][1] for p in pairs if p["change"] is True]


def judge_record(record: dict, config: ProgressionConfig, judges: list[tuple[str, ChatBackend]] | None = None
                 ) -> dict:
    names = caption_fields(record, config.captions)
    texts = {name: frame_texts(record, name) for name in names}
    action = record_action(record) if config.prompt == "eval" else None
    seed = record_seed(config.seed, record["id"]) % 2**32
    judges = judges if judges is not None else config.judges()
    pairs = []
    for i in range(frame_count(record, texts) - 1):
        answers: dict[str, dict[str, str] | None] = {}
        for name in names:
            pair = pair_texts(record, name, texts[name], i)
            if pair is None:
                answers[name] = None  # nothing to judge: this captioner fails the pair
                continue
            answers[name] = {ref: judge_pair(llm, *pair, prompt=config.prompt,
                                             action=action, seed=seed, template=config.template,
                                             where=f"record {record['id']}, {name} frames {i}-{i + 1}, judge {ref}: ")
                             for ref, llm in judges}
        pairs.append(vote(answers, config.prompt, i))
    out = {"prompt": config.prompt, "judges": [ref for ref, _ in judges], "captioners": names, "pairs": pairs,
           "distinct": distinct_frames(pairs)}
    if config.prompt == "eval":
        out["action"] = action
    return {"progression": out}


JUDGE_PROGRESSION = RecordStage(
    STAGE,
    summary="Progression detection: LLM judges say, per adjacent pair of frame captions, whether they show a "
            "change (ProgressCaptioner).",
    reads="[cyan]captions[/cyan] (and any [cyan]captions_*[/cyan]) = {items: [{frame, text}]} from vi "
          "caption-frames, [cyan]frames[/cyan]; with --prompt eval, [cyan]action[/cyan] (or action_label).",
    writes="[cyan]progression[/cyan] = {prompt, judges, captioners, pairs: [{frames: \\[i, i+1], answers: "
           "{captioner: {judge: A|B|C}}, consensus, change, passed: {captioner: bool}}], distinct: \\[frame indices]}. "
           "consensus: the majority letter over every judge and captioner (a tie: null); change: pseudo B / "
           "eval A true, pseudo A / eval B false, C or null null; passed: the captioner's own majority is the "
           "consensus and the consensus is not C/null; distinct: frame 0 and every frame whose pair with the "
           "one before has change true. A record without a caption field is a missing_field error.",
    example="vi frames -i seqs.json --image-root data | vi caption-frames | vi judge progression --llm "
            "smollm2-135m --llm qwen2.5-coder-1.5b | vi judge match -o judged.jsonl",
    config=ProgressionConfig, fields=("progression",), process=judge_record)
