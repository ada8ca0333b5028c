"""`make bench`: each stage against the raw library doing the same work in the same run, as ratios.

`run` is the entry point (`python -m vi.evaluation.bench.run`); `align`, `llm` and `stepdiff` hold
one section each; `tools` has the timing, alternation and table helpers, and knows no stage.
"""
