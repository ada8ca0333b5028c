"""The stages' logic, one folder per system, one module per stage: pure functions over records.

- `common/`: what every system's data stages share (probe, transcribe, sentence splitting,
  transcript text, chat prompts and their packaged `prompt_templates/`, image-text frame scorers).
- `showhowto/`: ShowHowTo's dataset mining (Sec. 3): filter, step extraction, frame alignment, export.
- `stepdiff/`: StepDiff's paired-video data (Sec. 3.1-3.2) and its video-conditioned LLM (Sec. 3.3).
- `progresscaptioner/`: ProgressCaptioner (empty until its stages land).

The thin `vi.cli` commands parse options, stream records and call these functions.
"""
