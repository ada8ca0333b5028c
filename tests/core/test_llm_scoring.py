"""llama.cpp's scoring (core/models/llm.py) gives each text the same number whatever was evaluated before
it and wherever it stands among the options: the record contract's determinism (--shard, --resume) and the
judges' debiasing (an answer scored first must not be favoured) rest on it."""

from __future__ import annotations

import pytest

SMOL = "smollm2-135m"


@pytest.mark.slow
def test_a_scoring_call_reuses_the_cache_only_inside_its_callers_context():
    """Outside a caller's `fresh_context`, each scoring call starts from an emptied context, so it scores the
    same whatever the model evaluated before (here the very prompt, a token at a time, as a generated reply
    fills the cache); inside one, a call reuses what the calls before it in that context evaluated, so a
    record's second question on the same transcript costs only its own tokens."""
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.models.llm import chat_prompt_tokens, option_log_probs

    llm = load_llm(LLMSettings(SMOL, n_ctx=1024, threads=2))
    messages = [{"role": "user", "content": "Is this a how-to video? First we rinse the rice, then we boil it."}]
    llm.llama.reset()
    first = option_log_probs(llm, messages, ["Yes", "No"])
    llm.llama.reset()
    for token in chat_prompt_tokens(llm, messages):
        llm.llama.eval([token])
    assert option_log_probs(llm, messages, ["Yes", "No"]) == first

    evaluated = []
    real_eval = llm.llama.eval
    llm.llama.eval = lambda tokens: (evaluated.append(len(tokens)), real_eval(tokens))[1]
    try:
        with llm.fresh_context():
            option_log_probs(llm, messages, ["Yes"])
            whole = sum(evaluated)
            option_log_probs(llm, messages, ["No"])
        assert sum(evaluated) - whole <= 2 < whole  # the prompt read once
        evaluated.clear()
        option_log_probs(llm, messages, ["Yes"])
        assert sum(evaluated) == whole  # outside: read again, from an emptied context
    finally:
        llm.llama.eval = real_eval


@pytest.mark.slow
def test_each_option_scores_the_same_wherever_it_stands():
    """Every option is decoded from the same evaluated prompt, so its score does not depend on its place. On
    the default LLM, scoring a later option after re-evaluating the prompt's last token alone (as the first
    option's was not) moved it by up to 0.16 nats here; the filter's "No" always came second."""
    from vi.core.models.catalog import DEFAULT_LLM
    from vi.core.models.chat import LLMSettings, load_llm
    from vi.core.models.llm import option_log_probs

    llm = load_llm(LLMSettings(DEFAULT_LLM, n_ctx=1024, threads=2))
    messages = [{"role": "user", "content": "Is this a how-to video? First we rinse the rice, then we boil it."}]
    options = ["Yes", "No", "Maybe not"]
    forward = option_log_probs(llm, messages, options)
    backward = option_log_probs(llm, messages, options[::-1])
    assert backward[::-1] == forward
    assert [option_log_probs(llm, messages, [option])[0] for option in options] == forward
