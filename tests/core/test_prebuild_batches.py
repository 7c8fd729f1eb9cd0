"""axle.testing.prebuild.batches: the cuts between batches of checks built together
depend on the ids, so that adding a check changes one batch's program only (the driver's
cache keeps the others)."""
from __future__ import annotations

from axle.testing.prebuild import MEAN_BATCH, batches


def _ids(n: int, tag: str = "") -> list[str]:
    return [f"op.add/add-f32[{i}]{tag}" for i in range(n)]


def test_batches_cover_every_id_once_in_order_and_are_bounded() -> None:
    ids = _ids(1000)
    cut = batches(ids)
    assert [i for b in cut for i in b] == ids
    assert all(1 <= len(b) <= 4 * MEAN_BATCH for b in cut)
    assert len(ids) / len(cut) > MEAN_BATCH / 3  # batches, not single ids
    assert batches([]) == []


def test_an_added_id_changes_only_its_own_batch() -> None:
    ids = _ids(400)
    before = [tuple(b) for b in batches(ids)]
    grown = ids[:123] + ["op.new/new-f32[7]"] + ids[123:]
    after = [tuple(b) for b in batches(grown)]
    changed = set(after) - set(before)
    assert len(changed) <= 2 and any("op.new/new-f32[7]" in b for b in changed), changed
    assert len(set(before) - set(after)) <= 2
