"""Model references -> what each role's loader needs (`vi.core.models.resolve.resolve`), the
catalogue, and the once-per-process loader cache."""

from vi.core.models.cache import load_once
from vi.core.models.catalog import CATALOG, ModelSpec, get_spec

__all__ = ["CATALOG", "ModelSpec", "get_spec", "load_once"]
