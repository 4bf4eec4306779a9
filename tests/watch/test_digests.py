"""The watch's digest table against a dict model, and what it holds per object (issue 32).

The table replaces a dict of uid strings to digest bytes; the property test drives both with the
same puts, discards, gets and clears, over enough uids that keys share slots (probing, the
backward shift of a removal, a shard's growth). The memory check is structural (bytes the
table's arrays hold), not timed.
"""

from __future__ import annotations

import sys
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.content.sanitize import content_hash
from pipeline.watch.digests import DigestTable, short_digest

_UIDS = [str(uuid.UUID(int=n + 1)) for n in range(600)]

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(_UIDS), st.integers(0, (1 << 64) - 1)),
        st.tuples(st.just("discard"), st.sampled_from(_UIDS), st.just(0)),
        st.tuples(st.just("get"), st.sampled_from(_UIDS), st.just(0)),
        st.tuples(st.just("clear"), st.just(""), st.just(0)),
    ),
    max_size=400,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_the_table_answers_as_a_dict_does(ops: list[tuple[str, str, int]]) -> None:
    table = DigestTable()
    model: dict[str, int] = {}
    for op, uid, digest in ops:
        if op == "put":
            table.put(uid, digest)
            model[uid] = digest
        elif op == "discard":
            table.discard(uid)
            model.pop(uid, None)
        elif op == "get":
            assert table.get(uid) == model.get(uid)
        else:
            table.clear()
            model.clear()
    assert len(table) == len(model)
    for uid in _UIDS:
        assert table.get(uid) == model.get(uid)


def test_removals_keep_every_other_key_reachable() -> None:
    """Thousands of keys in 256 small tables probe past each other; removing every third one
    (a backward shift each) must leave the rest found, and put back they are found again."""
    table = DigestTable()
    uids = [str(uuid.UUID(int=n + 1)) for n in range(5_000)]
    for n, uid in enumerate(uids):
        table.put(uid, n)
    for uid in uids[::3]:
        table.discard(uid)
    for n, uid in enumerate(uids):
        assert table.get(uid) == (None if n % 3 == 0 else n)
    for n, uid in enumerate(uids[::3]):
        table.put(uid, n)
    assert len(table) == len(uids)
    assert table.get("not-a-uid") is None


def test_a_short_digest_tells_contents_apart() -> None:
    one = short_digest(content_hash(b'{"a":1}', False))
    assert one == short_digest(content_hash(b'{"a":1}', False))
    assert one != short_digest(content_hash(b'{"a":2}', False))
    assert one != short_digest(content_hash(b'{"a":1}', True))
    assert 0 <= one < 1 << 64


def test_the_table_holds_a_few_dozen_bytes_per_object() -> None:
    """The dict it replaces held a uid string (85 bytes), a digest (65) and a dict slot per
    object: about 250 bytes. The table holds 16-byte slots at most three-quarters full."""
    objects = 20_000
    table = DigestTable()
    for n in range(objects):
        table.put(str(uuid.UUID(int=n + 1)), n)
    held = sys.getsizeof(table._shards) + sum(
        sys.getsizeof(shard) + sys.getsizeof(shard.slots) for shard in table._shards if shard is not None
    )
    assert held / objects < 48
    old = {str(uuid.UUID(int=n + 1)): content_hash(b"%d" % n, False) for n in range(objects)}
    old_held = sys.getsizeof(old) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in old.items())
    assert old_held / objects > 4 * held / objects
