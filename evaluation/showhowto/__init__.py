"""ShowHowTo's quality on the narrated samples, whose true steps and frames are known:
`quality` runs the whole mining pipeline, `align_quality` frame alignment from the true steps.
(The paper's Sec. 5.1 metrics for generated sequences will live here too.)
"""
