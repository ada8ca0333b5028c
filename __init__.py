"""vi: composable command-line stages for research on instructional (how-to) videos.

The repository's top-level folders are this package's subpackages (`vi.cli`, `vi.core`,
`vi.pipelines`, `vi.evaluation`); pyproject.toml maps them into the `vi` namespace.
"""

__version__ = "0.1.0"
