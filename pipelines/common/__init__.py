"""Stages and helpers every system's data pipeline shares.

`probe` (videos -> records), `transcribe` (whisperX speech -> sentence segments with word times),
`sentences` and `transcript_text` (sentence splitting, the speech lines an LLM prompt shows),
`chat_prompt` with the packaged `prompt_templates/` (one text file per LLM prompt, overridable),
and `frame_scorers` (open_clip and the offline EfficientNet label scorer that score frames against
text: ShowHowTo's alignment, StepDiff's VLEmbed baseline and encoders use them), and `word_stems`
(Porter stems, for the stages that compare texts by the words they share).
"""
