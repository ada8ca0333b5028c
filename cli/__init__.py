"""The `vi` command line: thin typer commands that parse options and call `vi.pipelines`."""
