"""One module per stage: pure functions over records, called by the thin `vi.cli` commands."""
