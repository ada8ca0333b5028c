"""The token sequences StepDiff's video-conditioned LLM reads: text with video slots, and which
tokens the loss (or a score) counts.

A pair question is put the way StepDiff does (Sec. 3.3):
    [INST] <<SYS>> You are a helpful AI assistant that answers questions about a pair of videos.
    Answer in a single sentence. Here is the first video: {V_r}. Here is the second video: {V_c}.
    <</SYS>> {q} [/INST] {a}
in the LLM's own chat template where its tokenizer has one (system and user turns, then the
assistant's answer closed by the template's end of turn), else in this Llama-2 format. Each
video slot becomes the projector's tokens for that clip. Interleaved data (clips with what is
said in them, StepDiff's pre-training) is plain: video, text, video, text, ... with the loss on
the text. The loss counts the answer and the end-of-turn tokens, so the model learns to stop.

Text around the slots is tokenized piece by piece (no special tokens added: templates carry their
own), the same way in training and in inference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vi.core.config import check_choice

PAIR_SYSTEM = ("You are a helpful AI assistant that answers questions about a pair of videos. Answer in a single "
               "sentence. Here is the first video: {reference}. Here is the second video: {candidate}.")
TEMPLATES = ("auto", "chat", "llama2")
_SLOT = "\x00VIDEO{}\x00"  # stand-in for a video inside rendered text; no template writes NUL
_ANSWER = "\x01ANSWER\x01"
IGNORE = -100  # the label of a token no loss counts (PyTorch's cross-entropy default)


@dataclass
class Sequence:
    """Token ids with video slots: `parts` are lists of ids or ints (a video's index into `videos`);
    `labels` mirror the id lists (IGNORE where not counted)."""

    videos: list[str]
    parts: list[list[int] | int] = field(default_factory=list)
    labels: list[list[int] | None] = field(default_factory=list)

    def add_text(self, ids: list[int], counted: bool = False) -> None:
        self.parts.append(list(ids))
        self.labels.append(list(ids) if counted else [IGNORE] * len(ids))

    def add_video(self, index: int) -> None:
        self.parts.append(index)
        self.labels.append(None)

    def text_tokens(self) -> int:
        return sum(len(p) for p in self.parts if isinstance(p, list))


class PromptFormat:
    """How one tokenizer's model is prompted: its chat template, or the Llama-2 format."""

    def __init__(self, tokenizer, template: str = "auto"):
        check_choice("--template", template, TEMPLATES)
        if template == "chat" and not getattr(tokenizer, "chat_template", None):
            raise ValueError("--template chat: this LLM's tokenizer has no chat template; use llama2")
        self.tokenizer = tokenizer
        self.template = template if template != "auto" else ("chat" if tokenizer.chat_template else "llama2")
        self.prompt_end, self.turn_end = self._turn_markers()

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def _render(self, system: str, user: str) -> str:
        if self.template == "llama2":
            bos = self.tokenizer.bos_token or ""
            return f"{bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] "
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _turn_markers(self) -> tuple[str, str]:
        """("", what closes an answer): the template's end of turn, read off a rendered answer."""
        eos = self.tokenizer.eos_token or ""
        if self.template == "llama2":
            return "", " " + eos if eos else ""
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                    {"role": "assistant", "content": _ANSWER}]
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False)
        after = rendered.split(_ANSWER, 1)[1].strip() if _ANSWER in rendered else ""
        return "", after or eos

    @property
    def stop_ids(self) -> list[int]:
        """Tokens that end a generated answer: the end of turn's first token, and EOS."""
        ids = self._ids(self.turn_end.strip())[:1]
        if self.tokenizer.eos_token_id is not None:
            ids.append(int(self.tokenizer.eos_token_id))
        return sorted(set(ids))

    def pair_question(self, question: str, videos: tuple[str, str], seed: str = "",
                      answer: str | None = None, system: str = PAIR_SYSTEM) -> tuple[Sequence, int]:
        """The pair prompt, then `seed` + `answer` (+ end of turn when answering is finished).

        Returns (sequence, the index of the first token of `answer` in the last text part).
        Training passes the whole answer as `answer` (all of it counted, end of turn too);
        scoring passes a seed ("In Video 2,") and the continuation, and counts only the latter;
        generation passes `answer=None` and continues from the seed.
        """
        text = self._render(system.format(reference=_SLOT.format(0), candidate=_SLOT.format(1)), question)
        sequence = Sequence(list(videos))
        for i, piece in enumerate(text.split("\x00")):
            if i % 2:  # "VIDEO0" / "VIDEO1"
                sequence.add_video(int(piece.removeprefix("VIDEO")))
            elif piece:
                sequence.add_text(self._ids(piece))
        if answer is None:
            sequence.add_text(self._ids(seed))
            return sequence, 0
        whole = seed + answer  # the caller spaces them: "In Video 2," + " the person ..."
        encoded = self.tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
        first = next((i for i, (_, end) in enumerate(offsets) if end > len(seed)), len(ids)) if seed else 0
        sequence.add_text(ids[:first])
        sequence.add_text(ids[first:], counted=True)
        return sequence, first

    def finished(self, sequence: Sequence) -> Sequence:
        """`sequence` with the end of turn appended and counted (a training target)."""
        sequence.add_text(self._ids(self.turn_end), counted=True)
        return sequence

    def interleaved(self, clips: list[str], texts: list[str]) -> Sequence:
        """video, text, video, text, ...: each clip followed by what is said in it, all text counted
        (no end token: pre-training text runs on, it is not an answer that stops)."""
        sequence = Sequence(list(clips))
        bos = self.tokenizer.bos_token
        if bos and self.template == "llama2":
            sequence.add_text(self._ids(bos))
        for index, text in enumerate(texts):
            sequence.add_video(index)
            sequence.add_text(self._ids(" " + " ".join(text.split())), counted=True)
        return sequence
