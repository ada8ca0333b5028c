"""ShowHowTo's quality on the narrated samples, whose true steps and frames are known:
`quality` runs the whole mining pipeline, `align_quality` frame alignment from the true steps.
The generator (Sec. 4-5): `generator_eval` + `generator_metrics` (Sec. 5.1's step faithfulness, scene
consistency, task faithfulness; vi eval showhowto), `generator_tiny` (a tiny model and a colour task it can
learn on a CPU), `generator_bench` (make bench section j).
"""
