"""Stage-independent machinery: record I/O, sharding and resume, devices, models, media.

Nothing in `vi.core` knows about any particular stage.
"""
