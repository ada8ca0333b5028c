"""File names made from record ids, shared by the stages that write a folder per record."""

from __future__ import annotations

import hashlib
import re


def safe_name(record_id: object) -> str:
    """A folder name for a record id: itself when it is tame and short, else tamed, cut to 80
    characters, plus a short hash (file systems refuse names over 255 bytes)."""
    text = str(record_id)
    tame = re.sub(r"[^\w.=+-]", "_", text).lstrip(".") or "_"
    if tame == text and len(text.encode("utf-8", "surrogatepass")) <= 120:
        return text
    return f"{tame[:80]}-{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
