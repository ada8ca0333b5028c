"""StepDiff's evaluation (Sec. 4-5): the official DiffCap/DiffMCQ/DiffRank metrics (`metrics`),
MCQ negative sampling (`mcq_negatives`), `vi predict` with the VLEmbed and Socratic baselines and
the trained model (`predict`, `vlembed`, `socratic`, `model_predict`), a benchmark of the sample
clips whose differences are known (`sample_benchmark`) and the pair-QA quality script.
"""
