"""The chaos oracle on hand-made histories (no I/O): each verdict it can give, and none it must not."""

from __future__ import annotations

from tests.chaos.faults import ZombieWindow
from tests.chaos.oracle import UNKNOWN_AUTHOR, SeenFact, Transition, check_facts, judge, percentile
from tests.chaos.workload import Mutation, fingerprint

WINDOW_S = 3.0
PATH = "clusters/chaos/team-0/configmaps/a.yaml"


def m(seq: int, user: str, fp: str | None, at: float) -> Mutation:
    return Mutation(seq, user, "patch", "b0", PATH, fp, at)


def t(fp: str | None, author: str, sha: str, pushed_at: float | None = None) -> Transition:
    return Transition("b0", PATH, fp, sha, author, pushed_at)


def test_a_clean_history_passes_and_measures_latency() -> None:
    verdict = judge(
        [m(1, "alice", "1", 10.0), m(2, "bob", "2", 11.0), m(3, "bob", None, 20.0)],
        [t("1", "alice", "c1", 14.0), t("2", "bob", "c2", 16.0), t(None, "bob", "c3", 25.0)],
        WINDOW_S,
    )
    assert (verdict.lost, verdict.duplicated, verdict.misattributed, verdict.unknown, verdict.phantom) == (
        [],
        [],
        [],
        [],
        [],
    )
    assert verdict.latencies_s == [4.0, 5.0, 5.0]


def test_a_version_replaced_by_the_same_person_within_a_window_is_merged_not_lost() -> None:
    verdict = judge([m(1, "alice", "1", 10.0), m(2, "alice", "2", 11.0)], [t("2", "alice", "c1")], WINDOW_S)
    assert verdict.lost == []
    assert verdict.merged == 1


def test_a_window_is_a_chain_of_one_persons_writes_on_a_branch() -> None:
    other = Mutation(2, "alice", "create", "b0", "clusters/chaos/team-0/configmaps/b.yaml", "2", 12.5)
    chained = [m(1, "alice", "1", 10.0), other, m(3, "alice", "3", 15.0)]
    assert (
        judge(
            chained, [t("3", "alice", "c1"), Transition("b0", other.path, "2", "c1", "alice", None)], WINDOW_S
        ).lost
        == []
    )
    interrupted = [
        m(1, "alice", "1", 10.0),
        Mutation(2, "bob", "create", "b0", other.path, "2", 11.0),
        m(3, "alice", "3", 12.0),
    ]
    assert [x.seq for x in judge(interrupted, [t("3", "alice", "c1")], WINDOW_S).lost] == [1, 2]


def test_another_persons_write_on_another_watch_stream_does_not_decide_the_window() -> None:
    # Found by seed 101: carol's Deployment update came between alice's two patches of a ConfigMap
    # by response time, but reached the commit worker before both (another watch stream), so the
    # worker rightly committed only alice's later version.
    deployment = Mutation(
        2, "carol", "update", "b0", "clusters/chaos/team-0/apps/deployments/web.yaml", "2/1", 11.0
    )
    mutations = [m(1, "alice", "1", 10.0), deployment, m(3, "alice", "3", 12.0)]
    history = [Transition("b0", deployment.path, "2/1", "c1", "carol", None), t("3", "alice", "c2")]
    verdict = judge(mutations, history, WINDOW_S)
    assert (verdict.lost, verdict.merged) == ([], 1)
    # A write on the same stream is certainly seen between them: the earlier version is lost.
    same_stream = Mutation(
        2, "carol", "create", "b0", "clusters/chaos/team-0/configmaps/other.yaml", "2", 11.0
    )
    mutations = [m(1, "alice", "1", 10.0), same_stream, m(3, "alice", "3", 12.0)]
    history = [Transition("b0", same_stream.path, "2", "c1", "carol", None), t("3", "alice", "c2")]
    assert [x.seq for x in judge(mutations, history, WINDOW_S).lost] == [1]


def test_a_write_in_flight_beside_another_does_not_order_them() -> None:
    # Found by seed 11: the robot's create and its apply 1.6 s later were committed as one window;
    # alice's write on the same stream was answered 0.18 ms after the create, but was sent before
    # the create was answered, so the apiserver may have stored it first.
    create = Mutation(1, "robot", "create", "b0", PATH, "1", 10.0, sent=9.99)
    beside = Mutation(
        2, "alice", "apply", "b0", "clusters/chaos/team-0/configmaps/b.yaml", "2", 10.00018, 9.995
    )
    apply = Mutation(3, "robot", "apply", "b0", PATH, "3", 11.6, sent=11.59)
    history = [Transition("b0", beside.path, "2", "c1", "alice", None), t("3", "robot", "c2")]
    verdict = judge([create, beside, apply], history, WINDOW_S)
    assert (verdict.lost, verdict.merged) == ([], 1)
    # sent after the create was answered: certainly stored between the two, so the create is lost
    after = Mutation(2, "alice", "apply", "b0", beside.path, "2", 10.3, sent=10.2)
    verdict = judge([create, after, apply], history, WINDOW_S)
    assert [x.seq for x in verdict.lost] == [1]
    # answered after the apply was sent: it may have been stored after the apply
    overlapping = Mutation(2, "alice", "apply", "b0", beside.path, "2", 11.595, sent=10.2)
    verdict = judge([create, overlapping, apply], history, WINDOW_S)
    assert (verdict.lost, verdict.merged) == ([], 1)


def test_removing_a_file_no_commit_showed_is_merged_not_lost() -> None:
    # Found by seed 101: alice created and deleted an object inside one window; Git never saw it.
    assert judge([m(1, "alice", "1", 10.0), m(2, "alice", None, 11.0)], [], WINDOW_S).merged == 2
    # Once a commit showed the file, its removal must be committed.
    lost = judge(
        [m(1, "alice", "1", 10.0), m(2, "alice", None, 20.0)], [t("1", "alice", "c1")], WINDOW_S
    ).lost
    assert [x.seq for x in lost] == [2]


def test_a_missing_version_is_lost_when_another_author_or_a_later_window_replaced_it() -> None:
    mutations = [m(1, "alice", "1", 10.0), m(2, "bob", "2", 11.0), m(3, "bob", "3", 30.0)]
    verdict = judge(mutations, [t("3", "bob", "c1")], WINDOW_S)
    assert [x.seq for x in verdict.lost] == [1, 2]


def test_duplicates_misattribution_unknown_authors_and_phantoms_are_told_apart() -> None:
    mutations = [m(1, "alice", "1", 10.0), m(2, "bob", "2", 20.0), m(3, "carol", "3", 30.0)]
    history = [
        t("1", "alice", "c1"),
        t("2", "alice", "c2"),
        t("1", "alice", "c3"),
        t("3", UNKNOWN_AUTHOR, "c4"),
        t("9", "dave", "c5"),
    ]
    verdict = judge(mutations, history, WINDOW_S)
    assert [x.sha for x in verdict.duplicated] == ["c3"]
    assert [(x.seq, y.sha) for x, y in verdict.misattributed] == [(2, "c2")]
    assert [(x.seq, y.sha) for x, y in verdict.unknown] == [(3, "c4")]
    assert [x.sha for x in verdict.phantom] == ["c5"]


def test_fingerprints_identify_versions_of_both_kinds() -> None:
    assert fingerprint({"kind": "ConfigMap", "data": {"seq": "7"}}) == "7"
    deployment = {
        "kind": "Deployment",
        "metadata": {"annotations": {"chaos/seq": "4"}},
        "spec": {"replicas": 3},
    }
    assert fingerprint(deployment) == "4/3"


def test_percentiles() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([2.0], 0.99) == 2.0


def test_an_unknown_commit_whose_note_names_the_right_person_later_is_late_not_unknown() -> None:
    late = Transition("b0", PATH, "1", "c1", UNKNOWN_AUTHOR, 14.0, late_author="alice")
    verdict = judge([m(1, "alice", "1", 10.0)], [late], WINDOW_S)
    assert (verdict.unknown, verdict.misattributed) == ([], [])
    assert [mutation.user for mutation, _ in verdict.late] == ["alice"]


def test_a_note_naming_somebody_else_is_misattributed() -> None:
    wrong = Transition("b0", PATH, "1", "c1", UNKNOWN_AUTHOR, 14.0, late_author="bob")
    verdict = judge([m(1, "alice", "1", 10.0)], [wrong], WINDOW_S)
    assert (verdict.unknown, verdict.late) == ([], [])
    assert len(verdict.misattributed) == 1


# -- admission facts instead of audit: an unknown author is excused only when no fact exists ------
DEPLOY = "clusters/chaos/team-0/apps/deployments/web.yaml"


def cm_fact(user: str, key: str, verb: str = "update", name: str = "a") -> SeenFact:
    return SeenFact(user, verb, "configmaps", "team-0", name, key, 9.0)


def test_a_named_change_is_matched_to_its_fact_by_author_object_and_content_key() -> None:
    verdict = judge([m(1, "alice", "1", 10.0)], [t("1", "alice", "c1")], WINDOW_S)
    keys = {f"c1:{PATH}": "content:k1"}
    assert check_facts(verdict, keys, [cm_fact("alice", "content:k1", "create")]).unmatched == []
    # another version of the object, another author, another object: not its fact
    for other in (
        cm_fact("alice", "content:k2"),
        cm_fact("bob", "content:k1"),
        cm_fact("alice", "content:k1", name="b"),
    ):
        check = check_facts(verdict, keys, [other])
        assert [x.seq for x, _ in check.unmatched] == [1], other
        assert (check.named, check.changes) == (1, 1)


def test_an_unknown_change_fails_only_when_its_fact_reached_the_log() -> None:
    mutations = [m(1, "alice", "1", 10.0), m(2, "bob", "2", 20.0)]
    verdict = judge(mutations, [t("1", UNKNOWN_AUTHOR, "c1"), t("2", UNKNOWN_AUTHOR, "c2")], WINDOW_S)
    keys = {f"c1:{PATH}": "content:k1", f"c2:{PATH}": "content:k2"}
    check = check_facts(verdict, keys, [cm_fact("bob", "content:k2")])
    assert [x.seq for x, _ in check.factless] == [1]
    assert [x.seq for x, _ in check.unused] == [2]
    assert (check.named, check.changes, check.named_pct) == (0, 2, 0.0)


def test_deletes_are_matched_by_a_delete_fact_of_their_author() -> None:
    mutations = [m(1, "alice", "1", 10.0), Mutation(2, "bob", "deletecollection", "b0", PATH, None, 20.0)]
    verdict = judge(mutations, [t("1", "alice", "c1"), t(None, UNKNOWN_AUTHOR, "c2")], WINDOW_S)
    keys = {f"c1:{PATH}": "content:k1"}
    facts = [cm_fact("alice", "content:k1", "create")]
    assert len(check_facts(verdict, keys, facts).factless) == 1
    assert len(check_facts(verdict, keys, [*facts, cm_fact("alice", "", "delete")]).factless) == 1
    assert len(check_facts(verdict, keys, [*facts, cm_fact("bob", "", "delete")]).unused) == 1


def test_a_scale_is_matched_by_a_name_only_fact_and_a_late_name_counts_as_named() -> None:
    scale = Mutation(1, "carol", "scale", "b0", DEPLOY, "4/3", 10.0)
    late = Transition("b0", DEPLOY, "4/3", "c1", UNKNOWN_AUTHOR, 14.0, late_author="carol")
    verdict = judge([scale], [late], WINDOW_S)
    keys = {f"c1:{DEPLOY}": "content:k1"}
    version_fact = SeenFact("carol", "update", "deployments", "team-0", "web", "content:k1", 9.0)
    assert len(check_facts(verdict, keys, [version_fact]).unmatched) == 1
    for stage_s in (-5.1, 50.1):  # carol's review of another scale of the same Deployment
        other = SeenFact("carol", "update", "deployments", "team-0", "web", "", stage_s)
        assert len(check_facts(verdict, keys, [other]).unmatched) == 1, stage_s
    for stage_s in (9.0, 35.0):  # before the response, or late: its replica was paused
        name_fact = SeenFact("carol", "update", "deployments", "team-0", "web", "", stage_s)
        check = check_facts(verdict, keys, [name_fact])
        assert (check.unmatched, check.named, check.named_pct) == ([], 1, 100.0)


def test_a_misattributed_change_counts_against_the_named_share() -> None:
    verdict = judge(
        [m(1, "alice", "1", 10.0), m(2, "bob", "2", 20.0)],
        [t("1", "alice", "c1"), t("2", "carol", "c2")],
        WINDOW_S,
    )
    check = check_facts(verdict, {f"c1:{PATH}": "content:k1"}, [cm_fact("alice", "content:k1")])
    assert (check.named, check.changes, check.named_pct) == (1, 2, 50.0)


def test_a_scale_is_matched_by_a_scale_fact_of_its_replica_count_and_time() -> None:
    scale = Mutation(1, "carol", "scale", "b0", DEPLOY, "4/3", 10.0)
    verdict = judge([scale], [Transition("b0", DEPLOY, "4/3", "c1", "carol", 14.0)], WINDOW_S)
    keys = {f"c1:{DEPLOY}": "content:k1"}

    def scale_fact(user: str, replicas: int, stage_s: float) -> SeenFact:
        return SeenFact(user, "update", "deployments", "team-0", "web", f"scale:41:{replicas}", stage_s)

    assert check_facts(verdict, keys, [scale_fact("carol", 3, 9.0)]).unmatched == []
    # another count, another user, another time: not this scale's fact
    for other in (scale_fact("carol", 4, 9.0), scale_fact("bob", 3, 9.0), scale_fact("carol", 3, 50.1)):
        assert len(check_facts(verdict, keys, [other]).unmatched) == 1, other


def test_a_zombie_write_is_the_paused_replicas_own_record_between_its_resume_and_its_step_down() -> None:
    window = ZombieWindow("vm-12-", resumed_ms=1_000, stepped_down_ms=2_000)
    assert window.holds(b"vm-12-ab12cd34", 1_000)
    assert window.holds(b"vm-12-ab12cd34", 2_000)
    assert not window.holds(b"vm-12-ab12cd34", 999)  # committed before the pause, acknowledged after it
    assert not window.holds(b"vm-12-ab12cd34", 2_001)  # dealt a shard again after stepping down
    assert not window.holds(b"vm-123-ab12cd34", 1_500)  # another process whose pid starts the same
    assert not window.holds(b"vm-7-ab12cd34", 1_500)  # the successor
    assert not window.holds(None, 1_500)
