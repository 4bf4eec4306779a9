"""The wire format, pinned: every record kind encodes to the bytes the codecs wrote before the binding.

`GOLDEN` holds, per case of `cases.CASES`, the record key and the value's bytes as the hand-written
mappings produced them (the commit "codec: golden-bytes tests for every record kind"). The Avro
mapping now derives from the field declarations (`pipeline.codec.binding`); a rename, reordering or
type change that alters the bytes fails here, and so does a decoder that no longer reads the old
bytes back to the same record.
"""

from __future__ import annotations

import pytest

from pipeline.codec import FACT_BATCH, OBJECT_STATE, SCHEMA_HEADER, codec
from pipeline.codec.object_state import ObjectState
from pipeline.codec.target_result import (
    PushOutcome,
    TargetRefusal,
    TargetResult,
    decode_result,
    encode_result,
)
from pipeline.codec.watch_event import WatchEventWriter
from pipeline.log.api import PendingRecord
from tests.codec.cases import CASES, FACTS, HEAD, STATE, WATCH_BODIES, WATCH_MS, Case, as_read

GOLDEN: dict[str, tuple[bytes | None, str]] = {
    "branch_work/write": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef9620002046e7304636d0a7569642d31043432027e"
        "7b2261706956657273696f6e223a227631222c226b696e64223a22436f6e6669674d6170222c226d65746164"
        "617461223a7b226e616d65223a22636d227d7d000a616c69636510416c69636520c38422616c696365406578"
        "616d706c652e6f72670a61756469740875736572f6a1abfef962",
    ),
    "branch_work/write-delete": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef9620004046e7304636d0a7569642d310434330000"
        "0a616c69636510416c69636520c38422616c696365406578616d706c652e6f72670a61756469740875736572"
        "f6a1abfef962",
    ),
    "branch_work/resync-begin": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef962020e06313030",
    ),
    "branch_work/resync-chunk": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef962040e0404046e7302610a7569642d6104313004"
        "7b7d0002620a7569642d620431317e7b2261706956657273696f6e223a227631222c226b696e64223a22436f"
        "6e6669674d6170222c226d65746164617461223a7b226e616d65223a22636d227d7d00",
    ),
    "branch_work/resync-end": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef962060e06f4030631303102020a7569642d78046e"
        "7308676f6e65000a616c69636510416c69636520c38422616c696365406578616d706c652e6f72670a617564"
        "69740875736572f6a1abfef96200",
    ),
    "branch_work/resync-end-unattributed": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef962060e06f4030631303100",
    ),
    "branch_work/target-deleted": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef962080c416c7761797301183c72656d6f76656420"
        "66726f6d2074686520636f6e66696775726174696f6e",
    ),
    "branch_work/commit-requested": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef9620a046e7308736176650c7569642d6372107361"
        "7665206e6f773c",
    ),
    "branch_work/late-author": (
        b"github:main",
        "0c676974687562086d61696e0674677414636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73089a01ceafabfef9620c02046e7304636d0a7569642d31043432000a"
        "616c69636510416c69636520c38422616c696365406578616d706c652e6f72670a61756469740875736572f6"
        "a1abfef9620ad28c01c0bab7fef962",
    ),
    "watch_event/live": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef9620002046e73067765620a7569642d7704353504066170700677656208746965720a66726f6e"
        "740000027e7b2261706956657273696f6e223a227631222c226b696e64223a22436f6e6669674d6170222c22"
        "6d65746164617461223a7b226e616d65223a22636d227d7d",
    ),
    "watch_event/live-deleting": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef9620004046e73067765620a7569642d77043536000102047b7d",
    ),
    "watch_event/snapshot-begin": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef962021006323030",
    ),
    "watch_event/snapshot-chunk": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef96204100002046e7302610a7569642d61043130047b7d0006313530",
    ),
    "watch_event/snapshot-chunk-empty": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef9620410020000",
    ),
    "watch_event/snapshot-end": (
        b"route-a:apps/deployments",
        "0e726f7574652d6112636c75737465722d61067467740861707073047631166465706c6f796d656e7473046e"
        "73d0afabfef962061004020632303106313530",
    ),
    "fact_batch": (
        None,
        "0e726f7574652d610861707073166465706c6f796d656e7473060a616c6963650a416c69636522616c696365"
        "406578616d706c652e6f72670c7570646174650e61756469742d31046e73067765620a7569642d7704353580"
        "80f2818389850600004873797374656d3a736572766963656163636f756e743a6b7562652d73797374656d3a"
        "676300002064656c657465636f6c6c656374696f6e00046e73000000c084af8283898506020e6170703d7765"
        "6202040475310475320006626f6200000000000000000000020000",
    ),
    "object_state": (
        b"tgt/apps/deployments/ns/web",
        "067467740c676974687562086d61696e14636c7573746572732f6112636c75737465722d6108617070730476"
        "31166465706c6f796d656e7473046e73067765620a7569642d770435357e7b2261706956657273696f6e223a"
        "227631222c226b696e64223a22436f6e6669674d6170222c226d65746164617461223a7b226e616d65223a22"
        "636d227d7d001e61706956657273696f6e3a2076310a000a616c69636510416c69636520c38422616c696365"
        "406578616d706c652e6f72670a61756469740875736572f6a1abfef962089a01a0bfabfef962",
    ),
    "config_state": (
        b"effective",
        "18f0ceabfef962024c7b226e616d65223a22676974222c2275726c223a2266696c653a2f2f2f7372762f6769"
        "74227d0002707b226e616d65223a2274222c2270726f7669646572223a22676974222c226272616e6368223a"
        "226d61696e222c2270617468223a2270227d000212476974546172676574046e7302740602425b2273706563"
        "2e70617468222c20226d7573742062652072656c6174697665225d00020c737065632e780000020274001257"
        "6174636852756c65046e73027202000212576174636852756c65046e730272040e77696467657473104e6f74"
        "466f756e640e6e6f20737563680000",
    ),
    "commit_request_result": (
        b"commitrequest/ns/save",
        "046e7308736176650c7569642d6372067467740c676974687562086d61696e12436f6d6d69747465640c6162"
        "6331323390eeabfef9620c707573686564",
    ),
    "target_result": (
        b"result/tgt",
        "067467740c676974687562086d61696e0c6162633132330c4661696c6564e0fdabfef9621072656a656374656400",
    ),
    "credentials_report": (
        b"credentials/github",
        "0c676974687562001a5365637265744d697373696e67106e732f6372656473b08dacfef962126e6f7420666f"
        "756e64207373682d656432353531392041414141",
    ),
    "stream_report": (
        b"streams/cluster-a",
        "12636c75737465722d61809dacfef962042e7467742f617070732f6465706c6f796d656e74732f6e73011253"
        "747265616d696e67147467742f2f706f64732f0012466f7262696464656e00",
    ),
    "watch_claim": (
        b"cluster-a",
        "12636c75737465722d61127265706c6963612d3101904e",
    ),
    "watch_cursor": (
        b"tgt/apps/deployments/ns",
        # schema v2 appended `baselineVersion` (here empty: one zero byte); v1 bytes still decode
        # (tests/unit/test_schemas.py reads every frozen version)
        "0674677412636c75737465722d610861707073047631166465706c6f796d656e7473046e7304393910d0acacfef96200",
    ),
    "dead_letter": (
        b"key",
        "1877617463682d6576656e747304220c726f7574657214626164207265636f726402066b657902040001021a"
        "77617463685f6576656e742f33041e72657665727365722d736368656d611a77617463685f6576656e742f33"
        "02780279001456616c75654572726f72c0deabfef96202",
    ),
    "dead_letter_replay": (
        None,
        "181877617463682d6576656e7473042204a0bcacfef962106f70657261746f72",
    ),
}


def test_every_case_is_pinned() -> None:
    assert sorted(GOLDEN) == sorted(case.name for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_encodes_to_the_pinned_bytes(case: Case) -> None:
    key, value = GOLDEN[case.name]
    pending = case.encode(case.value)
    assert (pending.key, pending.value) == (key, bytes.fromhex(value))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_pinned_bytes_decode_to_the_record(case: Case) -> None:
    key, value = GOLDEN[case.name]
    pinned = PendingRecord(bytes.fromhex(value), key=key, headers=case.encode(case.value).headers)
    assert case.decode(as_read(pinned)) == case.expected


def test_fact_batch_fastavro_path_writes_the_pinned_bytes() -> None:
    """The hand-written encoder and the declared mapping through fastavro agree with the pin."""
    assert codec(FACT_BATCH).encode(FACTS.to_avro()) == bytes.fromhex(GOLDEN["fact_batch"][1])


@pytest.mark.parametrize("kind", sorted(WATCH_BODIES))
def test_watch_event_fastavro_path_writes_the_pinned_bytes(kind: str) -> None:
    written = WatchEventWriter(HEAD).encode_generic(WATCH_BODIES[kind], WATCH_MS)
    assert written == bytes.fromhex(GOLDEN[f"watch_event/{kind}"][1])


def test_object_state_fastavro_path_reads_the_pinned_bytes() -> None:
    """The hand-written decoder is one path; the declared mapping over fastavro's dict is the other."""
    value = bytes.fromhex(GOLDEN["object_state"][1])
    header = dict(case_headers("object_state"))[SCHEMA_HEADER]
    assert ObjectState.from_avro(codec(OBJECT_STATE).decode(value, header)) == STATE
    assert codec(OBJECT_STATE).encode(STATE.to_avro()) == value


def case_headers(name: str) -> tuple[tuple[str, bytes], ...]:
    case = next(case for case in CASES if case.name == name)
    return case.encode(case.value).headers


#: Records as version 1 wrote them (pinned before version 2 added an optional field at the end:
#: config_state's `clusters`, target_result's `refusal`), which version 2 must still read.
V1_BYTES = {
    "config_state": GOLDEN["config_state"][1][:-2],
    "target_result": GOLDEN["target_result"][1][:-2],
}


@pytest.mark.parametrize("name", sorted(V1_BYTES))
def test_a_record_of_version_1_still_decodes(name: str) -> None:
    """Rolling upgrades read the records the previous release wrote (schemas/history)."""
    case = next(case for case in CASES if case.name == name)
    current = case.encode(case.value)
    (header_name, header), *rest = current.headers
    assert header.endswith(b"/2")
    v1_headers = ((header_name, header[:-1] + b"1"), *rest)
    v1 = PendingRecord(bytes.fromhex(V1_BYTES[name]), key=current.key, headers=v1_headers)
    assert case.decode(as_read(v1)) == case.expected


def test_a_refusal_travels_on_the_target_result() -> None:
    refused = TargetResult(
        "tgt",
        "github",
        "main",
        "",
        PushOutcome.NONE,
        1,
        "",
        TargetRefusal("UnsupportedKustomization", "apps/kustomization.yaml", "ConfigMap ns/a", 2),
    )
    assert decode_result(as_read(encode_result(refused))) == refused
