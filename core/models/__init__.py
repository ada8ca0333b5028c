"""Model references -> local weights, and the once-per-process loader cache."""

from vi.core.models.cache import load_once
from vi.core.models.catalog import CATALOG, ModelSpec, get_spec
from vi.core.models.resolve import resolve_model

__all__ = ["CATALOG", "ModelSpec", "get_spec", "load_once", "resolve_model"]
