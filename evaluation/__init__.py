"""Everything that measures: one folder per system, plus the benchmarks and the demo material.

- `stepdiff/`: the official DiffCap/DiffMCQ/DiffRank metrics, MCQ negatives, the baselines and
  the model's predictions (`vi predict`), the sample benchmark and the pair-QA quality script.
- `showhowto/`: the end-to-end and alignment quality scripts on the narrated samples.
- `bench/`: `make bench`, stage against raw library, as ratios.
- `demo/`: the narrated sample maker (the demos' and tests' material) and `make demo`'s
  terminal printers.
"""
