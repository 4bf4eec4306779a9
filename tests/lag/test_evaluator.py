"""The evaluator without I/O: where it keeps a steadier verdict than Burrow, and what it lists."""

from __future__ import annotations

from pipeline.lag.evaluator import Commit, LagEvaluator
from pipeline.lag.status import Status
from pipeline.log.api import TopicPartition
from tests.lag.helpers import lag_settings

TP = TopicPartition("t", 0)
POLL_MS = 1000


def test_a_steadily_lagging_consumer_stays_warn_between_polls() -> None:
    """Burrow's WARN flickers because it judges each commit against broker offsets up to a refresh
    old; here the lag at a commit is the log end interpolated at the commit's own time, so a
    consumer that falls further behind at every commit is WARN at every poll once the window is full."""
    evaluator = LagEvaluator(lag_settings(poll_interval_s=1.0, window=3), commits_fed=True)
    statuses = []
    for i in range(1, 12):
        now = i * POLL_MS
        # the log grows 100 per poll; the consumer commits mid-way between polls, 60 per poll
        commits = [Commit("g", TP, 60 * (i - 1), now - POLL_MS // 2)] if i > 1 else []
        snapshot = evaluator.observe({"g": {TP: 60 * (i - 1)}}, {TP: 0}, {TP: 100 * i}, now, commits)
        group = snapshot.group("g")
        assert group is not None
        statuses.append(group.partitions[0].status)
    assert statuses[4:] == [Status.WARN] * 7


def test_a_single_fresh_lagging_commit_is_not_stop() -> None:
    """Burrow reports one commit with lag as STOP at once; here STOP needs a poll interval of silence."""
    evaluator = LagEvaluator(lag_settings(poll_interval_s=1.0), commits_fed=True)
    evaluator.observe({"g": {TP: 0}}, {TP: 0}, {TP: 50}, 10_000)
    fresh = evaluator.observe({"g": {TP: 10}}, {TP: 0}, {TP: 50}, 10_400, [Commit("g", TP, 10, 10_300)])
    silent = evaluator.observe({"g": {TP: 10}}, {TP: 0}, {TP: 50}, 11_400)
    assert [s.groups[0].partitions[0].status for s in (fresh, silent)] == [Status.OK, Status.STOP]


def test_every_partition_of_a_committed_topic_is_listed() -> None:
    evaluator = LagEvaluator(lag_settings())
    other = TopicPartition("t", 1)
    elsewhere = TopicPartition("u", 0)
    snapshot = evaluator.observe(
        {"g": {TP: 5}}, {TP: 0, other: 3, elsewhere: 0}, {TP: 8, other: 10, elsewhere: 7}, 1000
    )
    (group,) = snapshot.groups
    rows = [(p.topic, p.partition, p.committed, p.lag) for p in group.partitions]
    assert rows == [("t", 0, 5, 3), ("t", 1, None, 7)]  # topic u is not the group's
    assert evaluator.window("g", other) is None
