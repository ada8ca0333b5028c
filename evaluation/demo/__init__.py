"""Demo material: `samples` makes the narrated how-to samples (espeak-ng narration over real photos,
with what is said and shown when) that `make demo` and the tests use; `show_steps`, `show_pairs`
and `show_transcript` are the terminal printers at the end of the demo targets.
"""
