"""StepDiff (Nagarajan & Torresani, "Step Differences in Instructional Video", CVPR 2024).

Data, Sec. 3.1-3.2: `clips` (keystep clips from benchmarks, HT-Step segments or extracted steps),
`describe` (a clip's action and objects), `pairing` (two clips of one keystep from distinct
videos) and `pair_qa` (the LLM's question-answer pairs about their differences).
Model, Sec. 3.3: `video_encoder` (frozen encoders: `--encoder` resolved and loaded) over
`video_encoder_archs` (the spec and the three encoder kinds), `encode_videos` (their tokens in a
feature store), `prompt` (the paper's pair prompt), `model` (Perceiver projector + frozen LLM),
`train_data` (the training mixture), `train` (`vi train stepdiff`) and `ask`.
"""
