"""CommitRequests on the branch FIFO: close the target's window now or after the delay, under the
request's message, and report the commit; a redelivered request makes no second commit.

Real bare Git remote and the real `BranchWorker`, with an injected clock (no timed assertions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from pipeline.codec.branch_work import CommitRequested, WorkItem
from pipeline.codec.commit_request_result import RequestOutcome, RequestResult
from pipeline.codec.target_result import TargetResult
from pipeline.commit.branch import BranchWorker
from pipeline.commit.flush import FlushAction, carrying_commit, decide, first_parents
from pipeline.commit.position import LogPosition
from pipeline.config import TargetSettings
from tests.commit.helpers import BOB, Work, cm, files, git, log_lines
from tests.commit.test_branch_worker import Harness


class Desk(Harness):
    """The branch-worker harness, keeping every result the worker reports."""

    def new_worker(self, clones: str = "clones", **ports: Any) -> BranchWorker:
        self.results: list[TargetResult | RequestResult] = []

        async def keep(result: TargetResult | RequestResult) -> None:
            self.results.append(result)

        return super().new_worker(clones, on_result=keep, **ports)

    def requests(self) -> list[RequestResult]:
        return [r for r in self.results if isinstance(r, RequestResult)]


def request(w: Work, name: str = "save-1", message: str = "", delay: int = 0, **kw: Any) -> WorkItem:
    body = CommitRequested("team-a", name, f"uid-{name}", message, delay)
    return w._item(body, group="", version="", resource="", scope="", **kw)


def closes(reason: str) -> float:
    labels = {"provider": "git", "branch": "main", "reason": reason}
    return REGISTRY.get_sample_value("reverser_commit_window_closes_total", labels) or 0.0


def remote_tip(remote: Path) -> str:
    return git(remote, "rev-parse", "main").strip()


async def test_a_request_closes_the_open_window_now_under_its_message(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300)
    w = Work()
    before = closes("commit_request")
    await h.feed(w.create(cm("a")), w.create(cm("b")))
    assert h.worker.window is not None, "a long window stays open"
    await h.feed(request(w, message="Raise the limits\n\nafter the ${name} load test\nReverser-Offset: 0:99"))
    assert h.worker.window is None
    assert closes("commit_request") == before + 1
    await h.worker.push()
    assert log_lines(h.remote) == ["Alice Example <alice@example.com>|Reverser Pipeline|Raise the limits"]
    message = git(h.remote, "log", "-1", "--format=%B", "main")
    # verbatim: template-like text stays literal, a line posing as a trailer is dropped
    assert "after the ${name} load test" in message
    assert "Reverser-Offset: 0:99" not in message
    assert "Reverser-Offset: 0:2" in message, "the commit claims the request's offset"
    assert sorted(files(h.remote)) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]
    (result,) = h.requests()
    assert (result.outcome, result.sha, result.branch) == (
        RequestOutcome.COMMITTED,
        remote_tip(h.remote),
        "main",
    )
    assert (result.namespace, result.name, result.uid, result.target) == (
        "team-a",
        "save-1",
        "uid-save-1",
        "t1",
    )
    assert sorted(h.settled) == [(0, 0), (0, 1), (0, 2)]


async def test_without_a_message_the_window_keeps_its_own(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300)
    w = Work()
    await h.feed(w.create(cm("a")), request(w))
    await h.worker.push()
    assert log_lines(h.remote, fmt="%s") == ["[CREATE] v1/configmaps/a"]


async def test_nothing_open_is_nothing_to_commit_and_settles_at_once(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300)
    w = Work()
    await h.feed(request(w))
    (result,) = h.requests()
    assert (result.outcome, result.sha) == (RequestOutcome.NOTHING_TO_COMMIT, "")
    assert "no commit window" in result.message
    assert h.settled == [(0, 0)]
    assert git(h.remote, "branch").strip() == ""


async def test_another_targets_window_is_left_open(tmp_path: Path) -> None:
    targets = [
        TargetSettings(name="t1", provider="git", path="one"),
        TargetSettings(name="t2", provider="git", path="two"),
    ]
    h = Desk(tmp_path, window_s=300, targets=targets)
    w = Work()
    await h.feed(w.create(cm("a"), target="t2", path="two"), request(w, target="t1", path="one"))
    assert h.worker.window is not None
    assert h.worker.window.target == "t2"
    (result,) = h.requests()
    assert result.outcome is RequestOutcome.NOTHING_TO_COMMIT
    assert "belongs to target t2" in result.message


async def test_close_delay_keeps_collecting_then_closes(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300, max_age_s=600)
    w = Work(step_ms=100)
    await h.feed(w.create(cm("a")), request(w, message="save", delay=10))
    assert h.worker.window is not None
    h.clock.advance(5)
    await h.feed(w.create(cm("b")))
    h.clock.advance(4.9)
    await h.worker.tick()
    assert h.worker.window is not None, "open until the delay ran out, although writes reset silence"
    h.clock.advance(0.2)
    await h.worker.tick()
    assert h.worker.window is None
    await h.worker.push()
    assert log_lines(h.remote, fmt="%s") == ["save"]
    assert sorted(files(h.remote)) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]


async def test_a_replayed_backlog_closes_where_the_delay_ended_in_event_time(tmp_path: Path) -> None:
    """Delivered together (a restart), a write made after the request's delay is not in its commit."""
    h = Desk(tmp_path, window_s=300, max_age_s=600)
    w = Work(step_ms=1000)
    await h.feed(w.create(cm("a")), request(w, message="save", delay=2), w.create(cm("b")))
    w.observed_ms += 5000
    await h.feed(w.create(cm("late")))
    assert h.worker.window is not None
    assert list(h.worker.window.writes) == ["live/team-a/configmaps/late.yaml"]
    await h.worker.push()
    message = git(h.remote, "log", "-1", "--format=%B", "main")
    assert message.startswith("save\n")
    assert sorted(files(h.remote)) == ["live/team-a/configmaps/a.yaml", "live/team-a/configmaps/b.yaml"]


async def test_another_author_closes_the_window_which_keeps_the_message(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300, max_age_s=600)
    w = Work(step_ms=10)
    await h.feed(w.create(cm("a")), request(w, message="alice saves", delay=60), w.create(cm("b"), BOB))
    await h.worker.push()
    assert log_lines(h.remote, fmt="%an|%s") == ["Alice Example|alice saves"]


async def test_a_redelivered_request_makes_no_second_commit_and_reports_the_same_sha(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300)
    w = Work()
    items = [w.create(cm("a")), request(w, message="save")]
    await h.feed(*items)
    await h.worker.push()
    sha = remote_tip(h.remote)
    # the process dies before its offsets are committed: a new worker gets the same records again
    h.worker = h.new_worker()
    await h.feed(*items)
    await h.worker.stop()
    assert len(log_lines(h.remote)) == 1
    (again,) = h.requests()
    assert (again.outcome, again.sha) == (RequestOutcome.COMMITTED, sha)


async def test_a_failed_push_is_reported_and_the_retry_commits(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=300)
    w = Work()
    await h.feed(w.create(cm("a")))
    moved = h.remote.with_name("moved.git")
    h.remote.rename(moved)
    await h.feed(request(w, message="save"))  # commits, and the first push fails
    (failed,) = h.requests()
    assert failed.outcome is RequestOutcome.PUSH_FAILED
    assert not failed.terminal
    moved.rename(h.remote)
    assert await h.worker.push()
    assert [r.outcome for r in h.requests()] == [RequestOutcome.PUSH_FAILED, RequestOutcome.COMMITTED]


def test_decide_closes_only_a_window_of_the_requests_target(tmp_path: Path) -> None:
    from pipeline.codec.branch_work import WorkAuthor
    from pipeline.commit.window import CommitWindow

    author = WorkAuthor("RESOLVED", "alice")
    window = CommitWindow(CommitWindow.key_of(author, "t1"), author, "t1", 0.0, 5.0, 5.0)
    assert decide(None, "t1", 0) is FlushAction.NOTHING
    assert decide(window, "t2", 0) is FlushAction.NOTHING
    assert decide(window, "t1", 0) is FlushAction.CLOSE_NOW
    assert decide(window, "t1", 3) is FlushAction.CLOSE_LATER


async def test_carrying_commit_is_the_oldest_claiming_the_offset(tmp_path: Path) -> None:
    h = Desk(tmp_path, window_s=0)
    w = Work()
    await h.feed(w.create(cm("a")), w.create(cm("b")), w.create(cm("c")))
    await h.worker.push()
    commits = list(first_parents(h.worker.repo.read_commit, remote_tip(h.remote)))
    shas = [c.sha for c in reversed(commits)]
    assert [carrying_commit(commits, LogPosition("git", "main", 0, offset)) for offset in (0, 1, 2)] == shas
    assert carrying_commit(commits, LogPosition("git", "main", 0, 3)) is None
    assert carrying_commit(commits, LogPosition("git", "main", 1, 0)) is None
    assert carrying_commit(commits, LogPosition("git", "other", 0, 0)) is None
