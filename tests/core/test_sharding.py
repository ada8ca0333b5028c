import pytest

from vi.core.sharding import Shard, shard_of

# shard_of(id, N) = first 8 bytes of SHA-1(id), big-endian, modulo N (docs/records.md)
PINNED = [4, 7, 0]
PINNED_1000 = [108, 823, 816]


def test_parse_and_validate():
    assert Shard.parse("3/8") == Shard(3, 8)
    for bad in ("8/8", "-1/4", "x/2", "1", "1/0"):
        with pytest.raises(ValueError):
            Shard.parse(bad)


def test_slurm_environment_sets_the_default_shard():
    assert Shard.from_slurm({}) is None
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert Shard.from_slurm(env) == Shard(3, 4)
    # --array=1-4: ids 1..4 map to shards 0..3
    env = {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "1"}
    assert Shard.from_slurm(env) == Shard(3, 4)
    # --array=0-30:2: 16 tasks 0, 2, ..., 30 map to shards 0..15
    env = {"SLURM_ARRAY_TASK_ID": "30", "SLURM_ARRAY_TASK_COUNT": "16", "SLURM_ARRAY_TASK_MIN": "0",
           "SLURM_ARRAY_TASK_STEP": "2"}
    assert Shard.from_slurm(env) == Shard(15, 16)
    with pytest.raises(ValueError, match="--shard"):
        Shard.from_slurm({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_hash_is_pinned():
    # literal values: a change here would silently reshuffle every running array job
    assert [shard_of(x, 8) for x in ("a", "video-1", "béla")] == PINNED
    assert [shard_of(x, 1000) for x in ("a", "video-1", "béla")] == PINNED_1000


def test_an_id_with_a_lone_surrogate_has_a_shard():
    from vi.core.sharding import shard_of

    assert 0 <= shard_of("a\ud800b", 7) < 7
    assert shard_of("a\udc80b", 7) == shard_of("a\udc80b", 7)
