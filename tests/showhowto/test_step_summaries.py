"""vi extract-steps drops a step said on a preview or a recap (pipelines/showhowto/step_summaries.py): a line
that names, in order, three or more of the steps said after it, with at most two before it (or mirrored).
Order and position decide, not similarity alone: the same clauses out of order, or the same line in the middle
of the procedure, name no plan. In the stage the preview's step goes only with --drop-previews."""

from __future__ import annotations

import pytest

from vi.pipelines.showhowto import extract_steps as es
from vi.pipelines.showhowto.step_citations import SegmentNames
from vi.pipelines.showhowto import step_summaries
from vi.pipelines.showhowto.step_summaries import clauses, drop_summaries, steps_named, summary_kind, word_names
from tests.showhowto.grounding_fakes import words_embedder
from tests.showhowto.test_extract_steps_quality import CopyingLLM, use_llm

ACTIONS = ["Cream the butter and sugar until fluffy.", "Add the eggs one at a time.",
           "Mix in the flour gently.", "Bake the tray for twelve minutes."]
PREVIEW = "So we'll cream the butter, add the eggs, mix in the flour, and bake it."


def test_clauses_are_cut_at_commas_and_and_and_then():
    assert clauses(PREVIEW) == ["so we'll cream the butter", "add the eggs", "mix in the flour", "bake it"]
    assert clauses("Seal, drawer, filter and a hot cycle.") == ["seal", "drawer", "filter", "a hot cycle"]


def test_a_single_word_names_the_steps_that_say_it_unless_most_steps_do():
    steps = ["Now scrub the bench with soapy water.", "Now let it dry in the sun.", "Sanding it down now, 120 grit.",
             "Brush on the oil."]
    assert word_names("sanded", steps) == [False, False, True, False]  # by stem: sanded, sanding
    assert word_names("now", steps) == [False] * 4  # said on most steps: a word of talk, no step's


def test_a_terse_list_of_single_words_is_a_recap_and_a_lone_word_is_not_a_list():
    steps = ["First I scrub the bench with soapy water.", "Then I let it dry in the sun.",
             "Sand it with 120 grit.", "Brush on the oil with a rag."]
    def embed_nothing(texts):  # an embedder that relates no phrase to any step: only the words can name them
        return [[1.0 if i == k else 0.0 for i in range(len(texts))] for k in range(len(texts))]
    assert summary_kind("So: scrub, dry, sand, oil, repeat.", steps, [], embed_nothing) == "recap"
    assert summary_kind("So: scrub, dry, sand, oil, repeat.", [], steps, embed_nothing) == "preview"
    assert summary_kind("So: oil, sand, dry, scrub.", steps, [], embed_nothing) is None  # out of order


def test_a_lone_word_is_not_read_as_a_list_item():
    """A real first step's line, "First, ... scrub ..., ... brush": its phrases name two later steps, and its
    lone "first" would name a third (the "first coat"), making the step a preview of the rest."""
    after = ["Let the first coat dry completely.", "Scrub the bench again with soapy water.",
             "Brush on the oil with a stiff brush."]
    line = "First, give it a good scrub with soapy water and a stiff brush."
    assert word_names("first", after) == [True, False, False]
    assert summary_kind(line, [], after, words_embedder) is None
    assert summary_kind(line.replace("First,", "First, then,"), [], after, words_embedder) == "preview"


def test_a_list_run_together_without_commas_is_read_as_windows_of_words(monkeypatch):
    """Unpunctuated speech runs a recap into one clause: read whole, it names one step at most; read as windows
    of two to four words, each naming the step it is nearest to, it names all four in order."""
    done = ["Take the wheel off the bike.", "Pull the old pads out of the caliper.",
            "Push the new pads into the caliper.", "Adjust the brake cable."]
    recap = "so we took the wheel off pulled the old pads out pushed new pads in and adjusted the brake cable"
    assert len(clauses(recap)) == 2
    assert summary_kind(recap, done, [], words_embedder) == "recap"
    assert summary_kind(recap, done[::-1], [], words_embedder) is None  # out of order: no recap
    ahead = ["Spin the wheel.", "Squeeze the lever.", "Ride round the block."]
    assert summary_kind(recap, done, ahead, words_embedder) is None  # three steps after it: mid-procedure
    monkeypatch.setattr(step_summaries, "RUN_ON_WORDS", 100)  # no clause long enough to be read as windows
    assert summary_kind(recap, done, [], words_embedder) is None


def test_a_window_names_only_the_step_it_is_nearest_to():
    """A real step's line that says the task's object three times: each of its windows near "the hinge" is close
    enough to all three later steps about the hinge, so windows that named every step above the bar would make
    the line a plan of them. A window names the nearest step only, and the line names one."""
    after = ["Lift the hinge off.", "Clean the old hinge.", "Oil the hinge pin."]
    line = "now unscrew the hinge screw from the hinge plate on the hinge side"
    vectors = words_embedder(["the hinge", *after])
    assert (vectors[0] @ vectors[1:].T >= step_summaries.WINDOW_MATCH).all()
    assert step_summaries.window_steps(step_summaries.WORD.findall(line), after, 0, words_embedder) == 1
    assert summary_kind(line, [], after, words_embedder) is None


def test_steps_named_is_a_one_to_one_match_in_order():
    diagonal = [[i == j for j in range(3)] for i in range(3)]
    assert steps_named(diagonal) == 3
    assert steps_named([row[::-1] for row in diagonal]) == 1  # the same matches in the reverse order
    assert steps_named([[True, True, True]]) == 1  # one clause names one step


def test_a_line_listing_the_steps_ahead_is_a_preview_and_one_listing_those_done_a_recap():
    assert summary_kind(PREVIEW, [], ACTIONS, words_embedder) == "preview"
    assert summary_kind(PREVIEW, ACTIONS, [], words_embedder) == "recap"
    assert summary_kind(PREVIEW, [], ACTIONS[::-1], words_embedder) is None  # out of order: no plan
    assert summary_kind(PREVIEW, ACTIONS[:3], ACTIONS, words_embedder) is None  # three steps before it: mid-procedure
    assert summary_kind(ACTIONS[0], [], ACTIONS[1:], words_embedder) is None  # a step names itself, not the rest


def names(first: int, last: int) -> str:
    return SegmentNames()(first, last)


def test_a_step_on_a_preview_is_dropped_and_one_that_goes_on_past_it_starts_on_its_next_line():
    lines = ["Hi, welcome back.", PREVIEW, *ACTIONS, "Thanks for watching."]
    steps = [(2, 2, "Make cookies."), (3, 3, "Cream."), (4, 4, "Eggs."), (5, 5, "Flour."), (6, 6, "Bake.")]
    repairs = []
    assert drop_summaries(steps, lines, words_embedder, repairs, names) == steps[1:]
    assert len(repairs) == 1 and "a preview" in repairs[0] and "dropped" in repairs[0]
    # a step that spans the preview and a line no other step is on keeps that line
    repairs = []
    assert drop_summaries([(2, 3, "Cream.")] + steps[2:], lines, words_embedder, repairs, names) == \
        [(3, 3, "Cream.")] + steps[2:]
    assert "starts on" in repairs[0]
    # the recap at the end too
    closing = lines[:-1] + ["So that's it: cream the butter, add the eggs, mix in the flour and bake."]
    assert drop_summaries(steps[1:] + [(7, 7, "Recap.")], closing, words_embedder, [], names) == steps[1:]


@pytest.mark.parametrize("drop_previews", [True, False])
def test_the_stage_drops_the_step_the_model_wrote_from_the_intros_plan(drop_previews, monkeypatch):
    """The 1.5B model writes a step from the plan, and the label pass calls the line a step (all actions)."""
    lines = ["Hi, welcome back to the kitchen.", PREVIEW, *ACTIONS, "Thanks for watching."]
    record = {"id": "cookies", "title": "Easy cookies", "duration": 40.0, "transcript": {"segments": [
        {"start": 5.0 * i, "end": 5.0 * i + 4.5, "text": f" {line}"} for i, line in enumerate(lines)]}}
    labels = ["TALK", "STEP", "STEP", "STEP", "STEP", "STEP", "TALK"]
    written = ["Make the cookies.", "Cream the butter.", "Add eggs.", "Add flour.", "Bake."]
    llm = CopyingLLM(labels, steps_for=lambda shown: [
        {"first_line": n, "last_line": n, "text": text} for n, text in enumerate(written, 2)])
    use_llm(llm, monkeypatch)
    monkeypatch.setattr(es.ExtractConfig, "embed", lambda self, texts: words_embedder(texts))
    out = es.extract(record, es.ExtractConfig(llm="smollm2-135m", grounding="cited",
                                              drop_previews=drop_previews))["steps"]
    assert [s["text"] for s in out["items"]] == (written[1:] if drop_previews else written)
    assert out["previews"] == ("dropped" if drop_previews else "kept")
    assert any("a preview" in r for r in out["repairs"]) is drop_previews


def test_a_clause_under_the_bar_names_the_step_it_is_nearest_to():
    """A past-tense recap's short clauses ("taped it off") sit under CLAUSE_MATCH with their own steps' lines, yet
    each is nearer its own step than any other: read by the nearest step, the line names all four in order. Out
    of order it names no recap, and a clause that is nearest a step only below NEAREST_MATCH names none."""
    done = ["I'm taping off the paint around the lens.", "Now sand it with the wet paper.",
            "Rub the polish in small circles.", "Wipe on the sealant in one pass."]
    recap = "So we taped it off, sanded it, polished it and sealed it."
    phrases = clauses(recap)
    assert phrases == ["so we taped it off", "sanded it", "polished it", "sealed it"]

    def embedder(cosine):  # each clause at `cosine` with its own step, orthogonal to every other step
        def embed(texts):
            import numpy as np
            vectors = []
            for text in texts:
                vector = np.zeros(2 * len(done))
                if text in done:
                    vector[done.index(text)] = 1.0
                elif text in phrases:
                    k = phrases.index(text)
                    vector[k], vector[len(done) + k] = cosine, (1 - cosine ** 2) ** 0.5
                vectors.append(vector)
            return np.asarray(vectors)
        return embed

    near = embedder(step_summaries.NEAREST_MATCH + 0.02)
    assert step_summaries.NEAREST_MATCH + 0.02 < step_summaries.CLAUSE_MATCH
    assert summary_kind(recap, done, [], near) == "recap"
    assert summary_kind(recap, done[::-1], [], near) is None  # out of order
    assert summary_kind(recap, done, [], embedder(step_summaries.NEAREST_MATCH - 0.02)) is None


def test_an_action_given_with_its_precondition_is_no_recap_when_conditions_name_nothing():
    """Blind set 38's drywall: late in the procedure, "once it's dry, sand it ... and wipe off the dust" is three
    clauses naming three steps said before it in order (let it dry, sand, wipe), with two steps after: read as a
    recap. Its first clause says when the step is done, not a step; read so, the line names two steps."""
    done = ["Let the compound dry.", "Sand the patch smooth with a sponge.", "Wipe the dust off the wall with a cloth."]
    ahead = ["Prime the patch.", "Paint the wall."]
    line = "Once it's dry, sand the patch again with the sponge and wipe the dust off."
    assert summary_kind(line, done, ahead, words_embedder) == "recap"
    assert summary_kind(line, done, ahead, words_embedder, conditions_name_nothing=True) is None
    # a recap stays one when a condition opens it: its other clauses still name three steps
    recap = "So once that was done, we let the compound dry, sand the patch and wipe the dust off the wall."
    assert summary_kind(recap, done, [], words_embedder, conditions_name_nothing=True) == "recap"
    assert step_summaries.CONDITION.match("so when that's cool") and not step_summaries.CONDITION.match("sand it")
