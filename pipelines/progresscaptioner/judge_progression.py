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

How a judge's letter is made (--debias; each judge's `verdicts` entry records the letters of each order, the
probabilities and likelihoods where they were scored, the captions' similarity and how the answer was decided):
- channel+probe (the default): the two readings below, channel and probe, each in units of its spread,
  summed; a change when the sum is above 0. They read different things and err on different pairs, so where
  one is unsure the other decides: on two caption sets written blind (measure5, measure6) its balanced
  accuracy was 0.76 and 0.78, the channel's 0.63 and 0.69, the probe's 0.65 and 0.79
  (evaluation/progresscaptioner/RESULTS.md, ninth pass). Without likelihoods: the probe alone;
- channel: no letter decides. Where the backend gives likelihoods (llama.cpp), the judge scores
  the second caption as its reply to prompts that give it the first caption and one of two hypotheses: the
  second image shows the same point of the task (only the view, the wording, a hand or an object's place
  differs), or a later one, after more of the task was done (pseudo: no significant change / noticeable
  changes); each hypothesis in two wordings, ours and the paper's prompt's words for its options, summed.
  The pair is a change when the second caption is likelier under "later" (`channel`, in nats, above 0). A
  model that prefers an answer or a letter has no say: both hypotheses score the same words, and only how
  well the captions fit each moves the score (noisy-channel prompting, Min et al. 2022). The paper's prompt
  is still asked once and its letter kept in `letters.paper`. A backend without likelihoods (openai:,
  transformers:) gets orders;
- probe: no LLM decides; a change probe reads the difference of --embedder's vectors of the two captions
  (model_configs/progression_probe.json); the paper's letter is kept;
- none: the paper's prompt asked once, the letter as it is (the paper's behaviour);
- orders: asked twice, the paper's prompt and the same prompt with the meanings of A and B swapped; the two
  letters agree: that answer; they disagree (a letter the model prefers whatever the content): uncertain;
- calibrated: on llama.cpp the letters of both orders are scored by likelihood and calibrated (contextual
  calibration: divided by the letter probabilities the same prompt gives content-free captions "N/A"), then
  combined as under orders; a backend without likelihoods (openai:, transformers:) gets orders.
On the tune pairs (evaluation/progresscaptioner/RESULTS.md) qwen2.5-coder-1.5b leans to the answer
"progressed", not to a letter: asked in both orders it says "progressed" in both, and its content-free letters
are near even, so calibration moved little. Hence channel, which asks for no answer at all, and the probe
beside it.
Under orders and calibrated, --embedder (minilm-l6) is the second signal, one that does not share the LLM's
leaning to "progressed": captions at least --same-state alike show the same state (no change) whatever the
orders said; the orders agreeing on "no change" stands; the rest (their "change", and the pairs they leave
undecided) is a change. The judge's letter in `answers` is the paper's letter for the decision (eval A
progressed, B not, C uncertain).

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
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Callable, Optional

from vi.core.config import check_choice, check_choices, internal, option, with_default
from vi.core.errors import RecordError
from vi.core.models.catalog import DEFAULT_LLM, DEFAULT_TEXT_EMBEDDING
from vi.core.models.chat import (ChatBackend, LLMConfig, LLMSettings, LLM_HELP, LLM_PANEL, SCHEMA_RETRIES, chat_json,
                                 check_llm, fresh_context, gives_likelihoods, load_llm)
from vi.core.models.chat_backend import MESSAGE_OVERHEAD_TOKENS
from vi.core.seeding import record_seed
from vi.core.stream import RecordStage
from vi.pipelines.common.chat_prompt import ChatPrompt, load_prompt

STAGE = "judge-progression"
PROMPTS = {"pseudo": "progression_pseudo", "eval": "progression_eval"}
# The same prompts with the meanings of A and B swapped: the second order of --debias orders|calibrated
SWAPPED_PROMPTS = {"pseudo": "progression_pseudo_swapped", "eval": "progression_eval_swapped"}
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
    check_choice("prompt", prompt, CHANGE)
    return CHANGE[prompt].get(letter) if letter is not None else None


@functools.lru_cache(maxsize=None)
def packaged_prompt(prompt: str) -> ChatPrompt:
    check_choice("--prompt", prompt, PROMPTS)
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
    messages = fitting(llm, template.render(**prompt_values(prompt, action, desc1=desc1, desc2=desc2)),
                       MAX_TOKENS, where)
    reply = chat_json(functools.partial(llm.chat, schema=ANSWER_SCHEMA), messages, ANSWER_SCHEMA,
                      max_tokens=MAX_TOKENS, temperature=0.0, seed=seed)
    letter = parse_letter(reply.text)
    if letter is None:
        raise RecordError("llm_output_invalid", f"{where}the judge answered {reply.text[:200]!r}, not "
                          f'{{"answer": "A"|"B"|"C"}}, {SCHEMA_RETRIES + 1} times; use a backend that '
                          "constrains its replies (llama.cpp, a server with json_schema) or another model")
    return letter


def prompt_values(prompt: str, action: str | None, **captions: str) -> dict[str, str]:
    """What a judge prompt's placeholders are filled with: the captions on one line each, and under eval the
    action (NO_ACTION without one)."""
    values = {name: one_line(text) for name, text in captions.items()}
    if prompt == "eval":
        values["action"] = one_line(action) if action else NO_ACTION
    return values


def fitting(llm: ChatBackend, messages: list[dict], reply_tokens: int, where: str) -> list[dict]:
    """`messages`, once checked to leave `reply_tokens` of the judge's context (else context_too_small)."""
    if llm.count_message_tokens(messages) + reply_tokens > llm.n_ctx:
        raise RecordError("context_too_small", f"{where}the captions and the prompt do not fit the judge's "
                          f"context of {llm.n_ctx} tokens; raise --n-ctx")
    return messages


def majority(letters: list[str]) -> str | None:
    """The most frequent letter; None when there is none or two letters tie for the most."""
    counts = Counter(letters).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


# --- debiasing: both orders, calibrated likelihoods, and a sentence embedder -------------------------------
# A small judge prefers one letter whatever the captions say (qwen2.5-coder-1.5b answers eval A to 92% of
# the release's pairs). Three remedies, each recorded per pair:
# - both orders: the paper's prompt and the same prompt with the meanings of A and B swapped; a preferred
#   letter then says "change" in one order and "no change" in the other, and the two cancel;
# - contextual calibration (Zhao et al. 2021): where the backend gives likelihoods (llama.cpp), the letters
#   are scored, not sampled, and each letter's probability is divided by the one the same prompt gives
#   content-free captions ("N/A"), which is the preference the captions did not cause;
# - a sentence embedder (minilm-l6): two captions of one state, reworded, are near each other whatever an
#   LLM prefers; captions this alike are the same state, and it decides the pairs the orders leave open.

# - a change probe (--debias probe): no LLM decides; a logistic regression on the difference of the embedder's
#   vectors of the two captions (the second's minus the first's), trained on the caption pairs written for
#   measuring that have been spent (evaluation/progresscaptioner/train_progression_probe.py), reads whether an
#   object's state changed. A similarity says how alike two captions are, not whether the state changed;
#   the direction they differ in does. The paper's letter is kept.
# - both (--debias channel+probe): the channel's score and the probe's log-odds, each in units of its own
#   spread, summed. The two read different things (how well an LLM finds the second caption fits "later"
#   against "the same moment"; the direction of the embedder's difference) and err on different pairs
#   (their scores correlate 0.45 on measure4), so where one is unsure the other decides.

DEBIAS = ("channel", "channel+probe", "probe", "orders", "calibrated", "none")
DEFAULT_DEBIAS = "channel+probe"  # vi judge progression's and vi keyframes' --debias
# --debias channel's two hypotheses per prompt, each in two wordings (ours, and the paper's prompt's own
# words for its options): the second caption's likelihood after each is summed over the wordings and compared
CHANNEL_HYPOTHESES = ("same", "later")
CHANNEL_WORDINGS = ("", "_paper")
CHANNEL_PROMPTS = {prompt: {f"{hypothesis}{wording}": f"progression_{prompt}_{hypothesis}{wording}"
                            for hypothesis in CHANNEL_HYPOTHESES for wording in CHANNEL_WORDINGS}
                   for prompt in ("pseudo", "eval")}
CHANNEL_NEEDS = {"pseudo": ("desc1",), "eval": ("action", "desc1")}
CHANNEL_MARGIN = 0.0  # nats: the second caption likelier after "later" than after "same" is a change
ORDERS = ("paper", "swapped")
CONTENT_FREE = "N/A"
# --same-state: on the tune pairs, changes were below 0.73 and rewordings the LLM called a change above 0.78
SAME_STATE = 0.75
REPLY_PREFIX = '{"answer": "'  # how the constrained reply starts; the letter is scored after it
CHANGE_BY_ORDER = {"paper": CHANGE, "swapped": {"pseudo": {"A": True, "B": False}, "eval": {"A": False, "B": True}}}
PROBE_FILE = "progression_probe.json"  # --debias probe's weights (model_configs/)
# channel+probe without likelihoods is the probe alone: neither asks a second order
ONE_ORDER = ("none", "probe", "channel+probe")  # the debias methods that ask the paper's prompt only
CHANNELS = ("channel", "channel+probe")  # the debias methods that score the second caption under the hypotheses
PROBE_READERS = ("probe", "channel+probe")  # the debias methods that read the change probe (and so its embedder)
SCORED = ("channel", "probe", "channel+probe")  # the verdicts a score decides (decide's `lean` moves them)
# channel+probe's units, each signal's standard deviation where it was not fitted: the default judge's
# (qwen2.5-coder-1.5b) channel scores, 8.2 nats on the judge's pair sets (150 scores) and 7.3 on measure4;
# the probe's log-odds, 0.73 on measure4 (its weights were trained on the sets before). Equal weight in
# these units is the one choice that fits nothing; the sum is read at 0, where each signal changes its mind.
CHANNEL_SPREAD = 8.0
PROBE_SPREAD = 0.73


@cache
def load_change_probe():
    """--debias probe's packaged probe (model_configs/progression_probe.json)."""
    from vi.core.models.linear_probe import LinearProbe

    return LinearProbe.packaged("vi.pipelines.progresscaptioner", PROBE_FILE)


def caption_differences(embedder, pairs: Sequence[tuple[str, str]]):
    """The second caption's unit vector minus the first's, one row per pair (what the change probe reads)."""
    vectors = embedder.encode([one_line(text) for pair in pairs for text in pair])
    return vectors[1::2] - vectors[0::2]


def paper_letter(change: bool | None, prompt: str) -> str:
    """The letter of the paper's prompt that says `change` (None: C, uncertain)."""
    if change is None:
        return "C"
    return next(letter for letter, meaning in CHANGE[prompt].items() if meaning is change)


def order_change(letter: str | None, prompt: str, order: str) -> bool | None:
    """What a letter says in one order: True change, False none, None (C or no letter) uncertain."""
    return CHANGE_BY_ORDER[order][prompt].get(letter) if letter is not None else None


def normalised(log_probs: list[float]) -> dict[str, float]:
    """The letters' probabilities among A, B and C (softmax of their log-likelihoods)."""
    top = max(log_probs)
    weights = [math.exp(x - top) for x in log_probs]
    return {letter: w / sum(weights) for letter, w in zip(LETTERS, weights)}


def calibrated(probs: dict[str, float], content_free: dict[str, float]) -> dict[str, float]:
    """Contextual calibration: each letter's probability over the one content-free captions get, renormalised;
    a letter the prompt makes likely whatever the captions comes back to even."""
    ratios = {letter: probs[letter] / max(content_free[letter], 1e-12) for letter in LETTERS}
    total = sum(ratios.values())
    return {letter: ratios[letter] / total for letter in LETTERS}


def argmax_letter(probs: dict[str, float]) -> str:
    return max(LETTERS, key=lambda letter: probs[letter])


def combine_orders(changes: dict[str, bool | None]) -> bool | None:
    """Both orders agree: their answer; they disagree, or either is uncertain: None."""
    found = set(changes.values())
    return found.pop() if len(found) == 1 else None


def decide(evidence: dict, prompt: str, same_state: float | None, lean: float = 0.0) -> dict:
    """The pair's decision from what the judge said (`evidence`, see PairJudge.evidence), pure:
    {change, letter (the paper's letter for it), method, decision (why, in words)}.

    `lean`: where a score decides (channel, probe, channel+probe), how far toward "change" it is read, in
    spreads (CHANNEL_SPREAD nats of the channel, PROBE_SPREAD of the probe's log-odds): a change when the
    score, so measured, is above -lean. 0 is where each signal changes its mind (vi judge progression, and
    vi keyframes unless its --keep-bias leans toward keeping). Letters are not moved by it.

    - channel: the second caption's log-likelihood after "a later moment" minus after "the same moment"
      (`channel`) above CHANNEL_MARGIN is a change; the paper's letter is evidence only;
    - none: the paper's one letter, as it is;
    - orders (letters of both orders) and calibrated (likelihoods of both orders, each order's letters
      calibrated): the orders agree: their answer; they disagree, or one is C: undecided;
    - then, with an embedder (`similarity`), captions at least `same_state` alike show the same state: no
      change, whatever the orders said; the orders agreeing on "no change" is believed whatever the
      similarity; the rest (the orders' "change", and what they left undecided) is a change. The embedder
      outweighs the orders' "change" because that is the answer a small judge gives too often: on the tune
      pairs it agreed on "progressed" in both orders for rewordings too.
    Without an embedder, undecided stays uncertain (C)."""
    method = evidence["method"]
    read_at = f" (read at {-lean:+.2f} spreads)" if lean else ""
    if method == "channel":
        score = evidence["channel"]
        change = score > CHANNEL_MARGIN - lean * CHANNEL_SPREAD
        return {"change": change, "letter": paper_letter(change, prompt), "method": "channel",
                "decision": f"the second caption's log-likelihood as a later moment minus as the same one: "
                            f"{score:+.2f} nats{read_at}: {'change' if change else 'no change'}"}
    if method == "channel+probe":
        channel, probe = evidence["channel"] / CHANNEL_SPREAD, evidence["probe"] / PROBE_SPREAD
        change = channel + probe > -lean
        return {"change": change, "letter": paper_letter(change, prompt), "method": "channel+probe",
                "decision": f"the channel's score {evidence['channel']:+.2f} nats ({channel:+.2f} spreads) plus the "
                            f"change probe's log-odds {evidence['probe']:+.2f} ({probe:+.2f} spreads): "
                            f"{channel + probe:+.2f}{read_at}: {'change' if change else 'no change'}"}
    if method == "probe":
        score = evidence["probe"]
        change = score > -lean * PROBE_SPREAD
        return {"change": change, "letter": paper_letter(change, prompt), "method": "probe",
                "decision": f"the change probe's log-odds on the captions' difference: {score:+.2f}{read_at}: "
                            f"{'change' if change else 'no change'}"}
    if method == "none":
        change = letter_to_change(evidence["letters"]["paper"], prompt)
        return {"change": change, "letter": paper_letter(change, prompt), "method": "none",
                "decision": "the paper's prompt, asked once"}
    if method == "calibrated":
        letters = {order: argmax_letter(evidence["calibrated"][order]) for order in ORDERS}
        how = "calibrated letters of both orders"
    else:
        letters = evidence["letters"]
        how = "letters of both orders"
    orders = combine_orders({order: order_change(letters[order], prompt, order) for order in ORDERS})
    said = {True: f"{how} agree: change", False: f"{how} agree: no change", None: f"{how} disagree"}[orders]
    similarity = evidence.get("similarity")
    if similarity is None or same_state is None:
        return {"change": orders, "letter": paper_letter(orders, prompt), "method": method,
                "decision": said if orders is not None else f"{said}: uncertain"}
    alike = similarity >= same_state
    change = orders is not False and not alike
    because = (f"caption similarity {similarity:.3f} >= {same_state}: same state" if alike else
               "no change" if orders is False else
               f"caption similarity {similarity:.3f} < {same_state}: change")
    return {"change": change, "letter": paper_letter(change, prompt), "method": f"{method}+embedder",
            "decision": f"{said}; {because}"}


@dataclass
class PairJudge:
    """One judge LLM as the stage asks it, with --debias: the paper's prompt (and its twin with A and B
    swapped), letters scored where the backend gives likelihoods, and the embedder for the undecided; or
    (channel) the second caption scored under the two hypotheses."""

    llm: ChatBackend
    prompt: str = "pseudo"
    debias: str = "orders"
    templates: dict[str, ChatPrompt] | None = None  # order -> prompt; default the packaged ones
    embedder: object | None = None  # encode(list[str]) -> unit vectors (core.models.text_embedding)
    same_state: float | None = None
    lean: float = 0.0  # spreads toward "change" at which a score is read (decide); vi keyframes' --keep-bias
    _content_free: dict = field(default_factory=dict)  # (order, action) -> letter probabilities

    def __post_init__(self) -> None:
        check_choice("--debias", self.debias, DEBIAS)
        self.templates = dict(self.templates or {})
        self.templates.setdefault("paper", packaged_prompt(self.prompt))
        if self.debias not in ONE_ORDER:
            self.templates.setdefault("swapped", load_prompt(SWAPPED_PROMPTS[self.prompt], None,
                                                             needs=NEEDS[self.prompt]))
        if self.debias in CHANNELS:
            for hypothesis, name in CHANNEL_PROMPTS[self.prompt].items():
                self.templates.setdefault(hypothesis, load_prompt(name, None, needs=CHANNEL_NEEDS[self.prompt]))

    @property
    def scores_letters(self) -> bool:
        """Letters scored by likelihood (calibrated, on a backend that gives them), else sampled."""
        return self.debias == "calibrated" and gives_likelihoods(self.llm)

    @property
    def scores_captions(self) -> bool:
        """--debias channel or channel+probe on a backend that gives likelihoods (else channel asks the orders and
        channel+probe is the probe alone)."""
        return self.debias in CHANNELS and gives_likelihoods(self.llm)

    def messages(self, order: str, desc1: str, desc2: str, action: str | None, where: str) -> list[dict]:
        values = prompt_values(self.prompt, action, desc1=desc1, desc2=desc2)
        return fitting(self.llm, self.templates[order].render(**values), MAX_TOKENS, where)

    def channel_log_probs(self, desc1: str, desc2: str, action: str | None, where: str) -> dict[str, float]:
        """log P(desc2 as the reply | desc1 and the hypothesis), summed over its tokens, per hypothesis and
        wording (CHANNEL_PROMPTS' keys)."""
        values = prompt_values(self.prompt, action, desc1=desc1)
        second = one_line(desc2)
        reply_tokens = self.llm.count_tokens(second) + MESSAGE_OVERHEAD_TOKENS  # the caption as the reply
        out = {}
        # In one emptied context: a pair's scores depend on nothing evaluated before it (the letter asked first,
        # the pair before in a shard); the four prompts share their head.
        with fresh_context(self.llm):
            for hypothesis in CHANNEL_PROMPTS[self.prompt]:
                messages = fitting(self.llm, self.templates[hypothesis].render(**values), reply_tokens, where)
                out[hypothesis] = round(float(self.llm.option_log_probs(messages, [second])[0]), 4)
        return out

    def letter_probs(self, order: str, desc1: str, desc2: str, action: str | None, where: str) -> dict[str, float]:
        scores = self.llm.option_log_probs(self.messages(order, desc1, desc2, action, where), LETTERS, REPLY_PREFIX)
        return normalised(scores)

    def content_free(self, order: str, action: str | None, where: str) -> dict[str, float]:
        """The letter probabilities of this prompt and order with content-free captions: once per action."""
        key = (order, action if self.prompt == "eval" else None)
        if key not in self._content_free:
            self._content_free[key] = self.letter_probs(order, CONTENT_FREE, CONTENT_FREE, action, where)
        return self._content_free[key]

    def evidence(self, desc1: str, desc2: str, *, action: str | None = None, seed: int = 0, where: str = "") -> dict:
        """What the judge says of a pair, before any decision: the letters of each order asked (and, scored,
        their probabilities raw and calibrated), and the captions' similarity when there is an embedder."""
        if self.debias == "none":
            letter = judge_pair(self.llm, desc1, desc2, prompt=self.prompt, action=action, seed=seed,
                                template=self.templates["paper"], where=where)
            return {"method": "none", "letters": {"paper": letter}}
        if self.scores_captions:
            evidence = self.channel_evidence(desc1, desc2, action=action, seed=seed, where=where)
            return self.with_probe(evidence, desc1, desc2) if self.debias == "channel+probe" else evidence
        if self.debias in PROBE_READERS:
            letter = judge_pair(self.llm, desc1, desc2, prompt=self.prompt, action=action, seed=seed,
                                template=self.templates["paper"], where=where)
            return {"method": "probe", "letters": {"paper": letter}, "probe": self.probe_log_odds(desc1, desc2)}
        if not self.scores_letters:
            return self.orders_evidence(desc1, desc2, action=action, seed=seed, where=where)
        free = {order: self.content_free(order, action, where) for order in ORDERS}  # each call in its own context
        with fresh_context(self.llm):
            probs = {order: self.letter_probs(order, desc1, desc2, action, where) for order in ORDERS}
        return {"method": "calibrated", "letters": {order: argmax_letter(probs[order]) for order in ORDERS},
                "probs": {order: _rounded(probs[order]) for order in ORDERS},
                "content_free": {order: _rounded(free[order]) for order in ORDERS},
                "calibrated": {order: _rounded(calibrated(probs[order], free[order])) for order in ORDERS},
                **self.similarity(desc1, desc2)}

    def with_probe(self, channel: dict, desc1: str, desc2: str) -> dict:
        """channel+probe's evidence: the channel's (scored now, or kept from an earlier judgement: its scores are
        the same under both) and the change probe's log-odds on the captions."""
        return {**channel, "method": "channel+probe", "probe": self.probe_log_odds(desc1, desc2)}

    def probe_log_odds(self, desc1: str, desc2: str) -> float:
        (score,) = load_change_probe().log_odds(caption_differences(self.embedder, [(desc1, desc2)]))
        return round(float(score), 4)

    def channel_evidence(self, desc1: str, desc2: str, *, action: str | None = None, seed: int = 0,
                         where: str = "", paper: str | None = None) -> dict:
        """The paper's letter (`paper`: already asked the same way) and the second caption's likelihood under
        each hypothesis."""
        letter = paper or judge_pair(self.llm, desc1, desc2, prompt=self.prompt, action=action, seed=seed,
                                     template=self.templates["paper"], where=where)
        scored = self.channel_log_probs(desc1, desc2, action, where)
        later, same = (sum(scored[f"{hypothesis}{wording}"] for wording in CHANNEL_WORDINGS)
                       for hypothesis in ("later", "same"))
        return {"method": "channel", "letters": {"paper": letter}, "log_probs": scored,
                "channel": round(later - same, 4)}

    def orders_evidence(self, desc1: str, desc2: str, *, action: str | None = None, seed: int = 0,
                        where: str = "", paper: str | None = None) -> dict:
        """The sampled letters of both orders (`paper`: the paper's order's letter, already asked the same way)."""
        letters = {order: paper if order == "paper" and paper else
                   judge_pair(self.llm, desc1, desc2, prompt=self.prompt, action=action, seed=seed,
                              template=self.templates[order], where=f"{where}{order} order: ")
                   for order in ORDERS}
        return {"method": "orders", "letters": letters, **self.similarity(desc1, desc2)}

    def similarity(self, desc1: str, desc2: str) -> dict:
        if self.embedder is None:
            return {}
        import numpy as np

        first, second = self.embedder.encode([one_line(desc1), one_line(desc2)])
        return {"similarity": round(float(np.dot(first, second)), 4)}

    def verdict_from(self, evidence: dict) -> dict:
        """The evidence and the decision made from it, in one dict (a pair's entry under `verdicts`)."""
        return {**decide(evidence, self.prompt, self.same_state, self.lean), **{k: v for k, v in evidence.items()
                                                                     if k != "method"}}

    def verdict(self, desc1: str, desc2: str, *, action: str | None = None, seed: int = 0, where: str = "") -> dict:
        return self.verdict_from(self.evidence(desc1, desc2, action=action, seed=seed, where=where))


def needs_embedder(debias: str, llm: ChatBackend) -> bool:
    """The embedder decides under probe, channel+probe, orders and calibrated, and under channel on a backend that
    falls back to orders."""
    return debias in (*PROBE_READERS, "orders", "calibrated") or (debias == "channel" and not gives_likelihoods(llm))


def cached_pair_judge(cache: dict, llm: ChatBackend, debias: str, *, prompt: str, templates: dict | None,
                      same_state: float, embedder: Callable[[], object], lean: float = 0.0) -> PairJudge:
    """The PairJudge asking `llm` with `debias`, made once per (LLM object, debias) and kept in `cache` (it
    holds the content-free letters); `embedder()` loads the --embedder, called only where it decides."""
    key = (id(llm), debias)  # the PairJudge holds llm, so its id is not reused meanwhile
    if key not in cache:
        cache[key] = PairJudge(llm, prompt=prompt, debias=debias, templates=templates, same_state=same_state,
                               embedder=embedder() if needs_embedder(debias, llm) else None, lean=lean)
    return cache[key]


def field_debias(debias: str, captions: object) -> str:
    """The --debias a caption field is judged with. channel scores a caption as a description of a moment; the
    offline captioner's captions are ImageNet label lists and feature distances, not descriptions, and the
    channel reads nearly all of their pairs as no change (evaluation/progresscaptioner/RESULTS.md), so such a
    field is judged by orders and the embedder instead (its verdicts say so in `method`); the change probe,
    trained on descriptions, is not given them either."""
    from vi.pipelines.progresscaptioner.offline_captioner import KIND

    if debias in {*CHANNELS, *PROBE_READERS} and isinstance(captions, dict) and captions.get("kind") == KIND:
        return "orders"
    return debias


def _rounded(probs: dict[str, float]) -> dict[str, float]:
    return {letter: round(p, 4) for letter, p in probs.items()}


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


def debias_templates(prompt: str, debias: str, prompt_file: Path | None, swapped_file: Path | None
                     ) -> dict[str, ChatPrompt]:
    """The prompt of each order --debias asks: the paper's (or --prompt-file) and, unless none, its twin."""
    check_choice("--debias", debias, DEBIAS)
    out = {"paper": load_prompt(PROMPTS[prompt], prompt_file, needs=NEEDS[prompt])}
    if debias in ONE_ORDER:
        return out
    if prompt_file is not None and swapped_file is None:
        raise ValueError(f"--prompt-file with --debias {debias} also needs --swapped-prompt-file, your prompt "
                         "with the meanings of A and B swapped (or give --debias none)")
    out["swapped"] = load_prompt(SWAPPED_PROMPTS[prompt], swapped_file, needs=NEEDS[prompt])
    return out


def check_debias(debias: str, embedder: str, same_state: float, device: str) -> None:
    """A bad --same-state is exit 2, a missing --embedder exit 5: before any record. Loads nothing."""
    if not -1.0 <= same_state <= 1.0:
        raise ValueError(f"--same-state is a cosine similarity, in [-1, 1]; got {same_state}")
    if debias in PROBE_READERS and embedder != load_change_probe().embedder:
        raise ValueError(f"--debias {debias} reads {load_change_probe().embedder}'s vectors (its weights were trained "
                         f"on them): give --embedder {load_change_probe().embedder}, not {embedder}")
    if debias != "none" and embedder != "none":
        from vi.core.devices import resolve_placement
        from vi.core.models.resolve import resolve

        resolve_placement(device, "auto")
        resolve(embedder, "text-embedding")


def load_embedder(ref: str, device: str):
    if ref == "none":
        return None
    from vi.core.devices import resolve_placement
    from vi.core.models.text_embedding import load_text_embedder

    return load_text_embedder(ref, resolve_placement(device, "auto"))


@dataclass(frozen=True, kw_only=True)
class ProgressionConfig:
    """The options of `vi judge progression`, checked when built (a bad one: exit 2; a missing model: exit 5).
    Several judges vote, so `llms` is a list (--llm repeated) and this is not an LLMConfig; the other LLM
    options are LLMConfig's."""

    llms: tuple[str, ...] = option(
        (DEFAULT_LLM,), flag="--llm", panel=LLM_PANEL, show_default=False,
        help=LLM_HELP + f" Repeat --llm for several judges (they vote); default {DEFAULT_LLM}.")
    prompt: str = option("pseudo", choices=PROMPTS, help=(
        "pseudo: the paper's pseudo-labelling prompt (A similar, B changed, C cannot tell); eval: "
        "FrameCapEval's (A action progressed, B not, C uncertain; it names the record's action)."))
    prompt_file: Path | None = option(None, help=(
        "Your own prompt instead of the packaged progression_pseudo.txt / progression_eval.txt; it must "
        "use ${desc1} and ${desc2} (and ${action} with --prompt eval) and ask for A, B or C."))
    captions: tuple[str, ...] = option(
        (), metavar="FIELD[,FIELD]", cli_type=Optional[str], cli_default=None, parse=caption_list,
        help="The caption fields to judge (vi caption-frames --into), comma-separated; default: every field "
             "named captions or captions_* that holds {items: [{frame, text}]}.")
    debias: str = option(DEFAULT_DEBIAS, choices=DEBIAS, help=(
        "How a judge's answer is freed of the one a small model gives whatever the captions say. channel+probe "
        "(default): the channel's score and the probe's log-odds, each in units of its spread, summed (without "
        "likelihoods: the probe). channel: no "
        "letter decides; the judge scores the second caption after the first under two hypotheses, the same "
        "moment reworded or a later one (pseudo: a noticeable change), and the likelier says (llama.cpp; other "
        "backends get orders); the paper's letter is kept. probe: no LLM decides; a change probe (model_configs/"
        "progression_probe.json) reads the difference of --embedder's vectors of the two captions; the paper's "
        "letter is kept. orders: ask "
        "in both orders (the paper's prompt, and the same prompt with A and B swapped); they disagree: "
        "uncertain (C). calibrated: the same, the letters scored by likelihood where the backend gives them "
        "(llama.cpp; others get orders) and divided by those content-free captions ('N/A') get. none: the "
        "paper's prompt asked once (the paper's behaviour). Under orders and calibrated, --embedder then has its say."))
    embedder: str = option(DEFAULT_TEXT_EMBEDDING, help=(
        "A sentence embedder (`vi models`: minilm-l6, mpnet-base, or a sentence-transformers folder). Under "
        "--debias probe and channel+probe, the one the change probe reads (minilm-l6; another is refused). The "
        "second signal of --debias orders|calibrated (and of channel on a backend without likelihoods): "
        "captions at least --same-state alike show the same "
        "state whatever the judge said; the orders agreeing on no change stands; the rest is a change. "
        "'none': the orders alone (they disagree: uncertain, C)."))
    same_state: float = option(SAME_STATE, min=-1.0, max=1.0, help=(
        "Cosine similarity of two captions at and above which --embedder says they show the same state."))
    swapped_prompt_file: Path | None = option(None, help=(
        "With --prompt-file and --debias other than none: your prompt with the meanings of A and B swapped "
        "(see the packaged progression_*_swapped.txt)."))
    n_ctx: int = with_default(LLMConfig, "n_ctx", 2048)
    device: str = "auto"
    seed: int = 0
    threads: int | None = with_default(LLMConfig, "threads", None)
    concurrency: int = with_default(LLMConfig, "concurrency", 1)
    templates: dict = internal(init=False)  # order -> prompt, for PairJudge
    # one PairJudge per judge LLM, kept across records: its content-free letters are scored once per action
    pair_judges: dict = internal(init=False)

    def __post_init__(self) -> None:
        if not self.llms:
            raise ValueError("give at least one judge with --llm")
        repeated = [ref for ref, n in Counter(self.llms).items() if n > 1]
        if repeated:
            raise ValueError(f"--llm {repeated[0]} is given twice: one vote per judge")
        check_choices(self)
        for ref in self.llms:  # a bad spec or a missing model: before any record
            check_llm(self.settings(ref))
        object.__setattr__(self, "templates", debias_templates(self.prompt, self.debias, self.prompt_file,
                                                               self.swapped_prompt_file))
        check_debias(self.debias, self.embedder, self.same_state, self.device)
        object.__setattr__(self, "pair_judges", {})

    def text_embedder(self):
        """The --embedder, loaded once per process; None for 'none'."""
        return load_embedder(self.embedder, self.device)

    def pair_judge(self, llm: ChatBackend, debias: str | None = None) -> PairJudge:
        """The stage's way of asking `llm` (kept per LLM object and --debias: it holds the content-free
        letters); `debias` for one caption field (`field_debias`), else --debias."""
        return cached_pair_judge(self.pair_judges, llm, debias or self.debias, prompt=self.prompt,
                                 templates=self.templates, same_state=self.same_state, embedder=self.text_embedder)

    def settings(self, ref: str) -> LLMSettings:
        return LLMSettings(ref, n_ctx=self.n_ctx, device=self.device, seed=self.seed, threads=self.threads,
                           concurrency=self.concurrency)

    def judges(self) -> list[tuple[str, ChatBackend]]:
        return [(ref, load_llm(self.settings(ref))) for ref in self.llms]


def vote(answers: dict[str, dict[str, str] | None], prompt: str, first: int,
         verdicts: dict[str, dict[str, dict] | None] | None = None) -> dict:
    """One pair's entry: its answers, consensus, change and per-captioner pass (and, when given, each
    judge's verdict: the letters of each order and how the answer was decided)."""
    every = [letter for judged in answers.values() if judged for letter in judged.values()]
    consensus = majority(every)
    change = letter_to_change(consensus, prompt)
    passed = {name: bool(judged) and change is not None and majority(list(judged.values())) == consensus
              for name, judged in answers.items()}
    out = {"frames": [first, first + 1], "answers": answers, "consensus": consensus, "change": change,
           "passed": passed}
    if verdicts is not None:
        out["verdicts"] = verdicts
    return out


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
    asked = {name: [(ref, config.pair_judge(llm, field_debias(config.debias, record[name]))) for ref, llm in judges]
             for name in names}
    pairs = []
    for i in range(frame_count(record, texts) - 1):
        answers: dict[str, dict[str, str] | None] = {}
        verdicts: dict[str, dict[str, dict] | None] = {}
        for name in names:
            pair = pair_texts(record, name, texts[name], i)
            if pair is None:
                answers[name] = verdicts[name] = None  # nothing to judge: this captioner fails the pair
                continue
            verdicts[name] = {ref: judge.verdict(*pair, action=action, seed=seed,
                                                 where=f"record {record['id']}, {name} frames {i}-{i + 1}, "
                                                       f"judge {ref}: ")
                              for ref, judge in asked[name]}
            answers[name] = {ref: verdict["letter"] for ref, verdict in verdicts[name].items()}
        pairs.append(vote(answers, config.prompt, i, verdicts))
    out = {"prompt": config.prompt, "debias": config.debias, "judges": [ref for ref, _ in judges],
           "captioners": names, "pairs": pairs, "distinct": distinct_frames(pairs)}
    if config.prompt == "eval":
        out["action"] = action
    return {"progression": out}


JUDGE_PROGRESSION = RecordStage(
    STAGE,
    reads="[cyan]captions[/cyan] (and any [cyan]captions_*[/cyan]) = {items: [{frame, text}]} from vi "
          "caption-frames, [cyan]frames[/cyan]; with --prompt eval, [cyan]action[/cyan] (or action_label).",
    writes="[cyan]progression[/cyan] = {prompt, debias, judges, captioners, pairs: [{frames: \\[i, i+1], answers: "
           "{captioner: {judge: A|B|C}}, verdicts: {captioner: {judge: {change, letter, method, decision, letters: "
           "{paper, swapped}, probs, content_free, calibrated, log_probs: {same, later, same_paper, later_paper}, "
           "channel, similarity}}}, consensus, change, passed: "
           "{captioner: bool}}], distinct: \\[frame indices]}. answers: each judge's letter of the paper's prompt "
           "for its decision (--debias: verdicts say how it was made). "
           "consensus: the majority letter over every judge and captioner (a tie: null); change: pseudo B / "
           "eval A true, pseudo A / eval B false, C or null null; passed: the captioner's own majority is the "
           "consensus and the consensus is not C/null; distinct: frame 0 and every frame whose pair with the "
           "one before has change true. A record without a caption field is a missing_field error.",
    example="vi frames -i seqs.json --image-root data | vi caption-frames | vi judge progression --llm "
            "smollm2-135m --llm qwen2.5-coder-1.5b | vi judge match -o judged.jsonl",
    config=ProgressionConfig, fields=("progression",), process=judge_record)
