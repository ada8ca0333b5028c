"""A trained StepDiff model (vi train stepdiff) as a `vi predict` method, asked as the Socratic
baseline asks its text LLM (the prompts of `stepdiff_predict`), with the two videos' projected
tokens in place of their descriptions:
- DiffCap: the greedy continuation of "The main difference in {category} is that in Video 2,", in
  the annotation style ("... instead of ...");
- DiffMCQ: log P(" " + caption) after "In Video 2," (caption's first letter lowered), summed over
  the caption's tokens, given each option pair; a row's four options go through the model in one
  batch (`option_scores`);
- DiffRank: P(YES) / (P(YES) + P(NO)) for "Do these two videos show the same {category}?", the
  row's four targets in one batch (`target_scores`). Where "YES" and "NO" are each one token of the
  LLM's vocabulary, these are the next-token probabilities after the prompt (`next_token_log_probs`);
  else, as the Socratic baseline does, the likelihoods of the whole answers (SmolLM2 reads "YES" as
  "Y" + "ES", and "Y" alone also starts "Yes", "You", ...): the 8 answers of a row in one batch.

A clip's encoder tokens come from feature stores (--features; their encoder must be the one the
checkpoint was trained on), else are encoded from --video-root with the checkpoint's encoder.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vi.evaluation.stepdiff import predict as sp
from vi.evaluation.stepdiff.socratic import lower_first

YES, NO = "YES", "NO"


class StepDiffPredictor:
    """`model` is a StepDiffModel; `clip_tokens(clip id)` gives a clip's encoder tokens."""

    def __init__(self, model, clip_tokens: Callable[[str], object], max_new_tokens: int = 64):
        self.model, self.clip_tokens, self.max_new_tokens = model, clip_tokens, max_new_tokens
        ids = [model.format.tokenizer(text, add_special_tokens=False)["input_ids"] for text in (YES, NO)]
        self.single_token_answers = all(len(i) == 1 for i in ids) and ids[0] != ids[1]
        self.answer_ids = [i[0] for i in ids] if self.single_token_answers else None

    def features(self, clips) -> dict:
        return {clip: self.clip_tokens(clip) for clip in dict.fromkeys(clips)}

    # --- the prompts ----------------------------------------------------------------------------

    def caption_sequence(self, reference: str, candidate: str, category: str):
        phrase = sp.category_phrase(category)
        return self.model.format.pair_question(sp.DIFFCAP_QUESTION.format(category=phrase), (reference, candidate),
                                               seed=sp.DIFFCAP_SEED.format(category=phrase))[0]

    def option_sequence(self, reference: str, candidate: str, caption: str, category: str):
        question = sp.DIFFMCQ_QUESTION.format(category=sp.category_phrase(category))
        return self.model.format.pair_question(question, (reference, candidate), seed=sp.DIFFMCQ_SEED,
                                               answer=" " + lower_first(" ".join(caption.split())))[0]

    def rank_sequence(self, reference: str, target: str, category: str, answer: str | None = None):
        question = sp.DIFFRANK_QUESTION.format(category=sp.category_phrase(category))
        return self.model.format.pair_question(question, (reference, target), answer=answer)[0]

    # --- the three tasks ------------------------------------------------------------------------

    def caption(self, reference: str, candidate: str, category: str) -> str:
        text = self.model.generate(self.caption_sequence(reference, candidate, category),
                                   self.features([reference, candidate]), self.max_new_tokens)
        return sp.annotation_style(text)

    def option_scores(self, row: dict) -> list[float]:
        sequences = [self.option_sequence(ref, cand, row["difference"], row["category"])
                     for ref, cand in row["options"]]
        return self.model.scores(sequences, self.features(c for pair in row["options"] for c in pair))

    def option_score(self, reference: str, candidate: str, caption: str, category: str) -> float:
        return self.model.scores([self.option_sequence(reference, candidate, caption, category)],
                                 self.features([reference, candidate]))[0]

    def yes_probabilities(self, reference: str, targets: list[str], category: str) -> list[float]:
        features = self.features([reference, *targets])
        if self.single_token_answers:
            log_probs = self.model.next_token_log_probs(
                [self.rank_sequence(reference, t, category) for t in targets], features)
            pairs = log_probs[:, self.answer_ids].tolist()
        else:
            scores = self.model.scores([self.rank_sequence(reference, t, category, answer)
                                        for t in targets for answer in (YES, NO)], features)
            pairs = [scores[i:i + 2] for i in range(0, len(scores), 2)]
        return [1.0 / (1.0 + math.exp(log_no - log_yes)) for log_yes, log_no in pairs]

    def target_scores(self, row: dict) -> list[float]:
        return self.yes_probabilities(row["reference"], list(row["targets"]), row["category"])

    def target_score(self, reference: str, target: str, category: str) -> float:
        return self.yes_probabilities(reference, [target], category)[0]


def build(config: sp.PredictConfig, rows: list[sp.BenchmarkRow]) -> StepDiffPredictor:
    """The method for `vi predict --method stepdiff`: the checkpoint, feature stores checked against
    its encoder, and every clip found (in a store, or its video under --video-root) before the model
    loads."""
    from vi.core.devices import resolve_placement
    from vi.pipelines.stepdiff import ask
    from vi.pipelines.stepdiff.model import ModelConfig

    task = config.task.value
    folder = ask.resolve_checkpoint(config.checkpoint)
    model_config = ModelConfig.load(folder)
    placement = resolve_placement(config.device, config.dtype, engine="torch")
    clips = ask.ClipFeatures(model_config.encoder, list(config.features), placement, folder)
    todo = sorted({c for item in rows for c in sp.row_clips(task, item.row) if not clips.stored(c)})
    if todo and config.video_root is None:
        raise ValueError(f"--features has no tokens of {len(todo)} clips of the benchmark, e.g. {todo[0]}; give "
                         "--video-root to encode them here with the checkpoint's encoder "
                         f"({model_config.encoder.get('encoder')})")
    pending = set(todo)
    videos = sp.clip_videos(task, [r for r in rows if pending & set(sp.row_clips(task, r.row))], config.video_root,
                            str(config.gt)) if todo else {}

    def clip_tokens(clip: str):
        if clips.stored(clip):
            return clips.get(clip)
        video = videos[clip]
        return clips.encoded(video.path, video.start, video.end)

    return StepDiffPredictor(ask.load_model(folder, placement), clip_tokens, config.max_new_tokens)
