"""The history checker (``testing/history.py``) over hand-made histories:
each violation kind is found, nothing is reported for a correct log, retries
and attempts in flight are judged as the simulator records them, and produce
answers are classified as the HTTP contract says."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from server._errors import MetadataStoreError, OutcomeUnknown
from testing.history import (
    FAILED,
    KINDS,
    OK,
    UNKNOWN,
    Outcome,
    ProducedBatch,
    ReadPass,
    Tracker,
    Violation,
    behind,
    check,
    check_order,
    check_spans,
    follower_gaps,
    is_unknown_outcome,
)
from testing._chaos_workload import classify_produce_reply
from testing.sim._history import Attempt

T = "t"


def batch(bid: str, outcome: str, start: int | None = None, n: int = 3, partition: int = 0) -> ProducedBatch:
    return ProducedBatch(bid, T, partition, tuple(f"{bid}-{i}".encode() for i in range(n)), outcome, start)


def log_of(*batches_at: tuple[ProducedBatch, int], partition: int = 0) -> dict[int, bytes]:
    """offset -> value with each batch's records laid out from the given offset."""
    out: dict[int, bytes] = {}
    for b, start in batches_at:
        for i, v in enumerate(b.payloads):
            out[start + i] = v
    return out


def read(records: dict[int, bytes], source: str = "library", errors: dict[int, str] | None = None,
         partition: int = 0) -> ReadPass:
    return ReadPass(source, {(T, partition): records}, {(T, partition): errors} if errors else {})


def kinds(result) -> dict[str, int]:
    return result.by_kind()


def test_a_correct_log_has_no_violations_and_counts_outcomes() -> None:
    a, b = batch("a", OK, 1), batch("b", OK, 4, n=2)
    failed, unknown_in, unknown_out = batch("f", FAILED), batch("u1", UNKNOWN), batch("u2", UNKNOWN)
    records = log_of((a, 1), (b, 4), (unknown_in, 6))
    result = check([a, b, failed, unknown_in, unknown_out], [read(records), read(dict(records), "consume@b1")])
    assert result.ok, result.violations
    assert result.batches == {OK: 2, FAILED: 1, UNKNOWN: 2}
    assert result.records == {OK: 5, FAILED: 3, UNKNOWN: 6}
    assert (result.unknown_present, result.unknown_absent) == (1, 1)
    assert result.reads == {"library": 8, "consume@b1": 8}


def test_lost_acknowledged_record() -> None:
    a = batch("a", OK, 1)
    records = log_of((a, 1))
    del records[2]
    result = check([a], [read(records)])
    assert kinds(result) == {"lost": 1}
    (v,) = result.violations
    assert (v.batch_id, v.offset, v.sources) == ("a", 2, ("library",))


def test_acknowledged_record_at_an_unreadable_offset() -> None:
    a, b = batch("a", OK, 1), batch("b", OK, 4)
    records = log_of((a, 1))
    result = check([a, b], [read(records, errors={4: "InconsistentReadState: gap", 5: "x", 6: "x"})])
    assert kinds(result) == {"ack_unreadable": 1, "unreadable": 1}
    unreadable = [v for v in result.violations if v.kind == "unreadable"][0]
    assert unreadable.offset == 4 and "4..6 (3)" in unreadable.detail


def test_acknowledged_record_at_another_offset() -> None:
    a = batch("a", OK, 1)
    result = check([a], [read(log_of((a, 2)))])
    assert kinds(result) == {"wrong_offset": 1}


def test_two_acknowledgements_of_one_offset() -> None:
    a, b = batch("a", OK, 1), batch("b", OK, 3)
    result = check([a, b], [])
    assert kinds(result) == {"ack_overlap": 1}


@pytest.mark.parametrize("outcome", [OK, FAILED, UNKNOWN])
def test_a_batch_twice_in_the_log(outcome: str) -> None:
    b = batch("b", outcome, 1 if outcome == OK else None)
    result = check([b], [read(log_of((b, 1), (b, 4)))])
    expected = {"duplicate": 1}
    if outcome == FAILED:
        expected["failed_present"] = 1
    assert kinds(result) == expected


def test_a_definitely_failed_batch_in_the_log() -> None:
    ok, failed = batch("ok", OK, 1), ProducedBatch("f", T, 0, (b"f-0", b"f-1"), FAILED, None, "HTTP 409 MetadataStoreError")
    result = check([ok, failed], [read(log_of((ok, 1), (failed, 4)))])
    assert kinds(result) == {"failed_present": 1}
    assert "MetadataStoreError" in result.violations[0].detail


@pytest.mark.parametrize("outcome", [FAILED, UNKNOWN])
def test_a_batch_in_part(outcome: str) -> None:
    b = batch("b", outcome, n=4)
    records = log_of((b, 1))
    del records[3]
    result = check([b], [read(records)])
    expected = {"partial": 1}
    if outcome == FAILED:
        expected["failed_present"] = 1
    assert kinds(result) == expected


def test_missing_records_at_unreadable_offsets_are_not_called_partial() -> None:
    b = batch("b", UNKNOWN, n=4)
    records = log_of((b, 1))
    del records[3], records[4]
    result = check([b], [read(records, errors={3: "gap", 4: "gap"})])
    assert kinds(result) == {"unreadable": 1}


def test_a_batch_whole_but_out_of_order() -> None:
    b = batch("b", UNKNOWN, n=3)
    records = {1: b.payloads[0], 2: b.payloads[2], 3: b.payloads[1]}
    assert kinds(check([b], [read(records)])) == {"torn": 1}
    gap = {1: b.payloads[0], 2: b.payloads[1], 5: b.payloads[2]}
    assert kinds(check([b], [read(gap)])) == {"torn": 1}


def test_a_value_never_sent() -> None:
    a = batch("a", OK, 1)
    records = {**log_of((a, 1)), 4: b"stranger"}
    result = check([a], [read(records)])
    assert kinds(result) == {"unexpected": 1}
    other_partition = ReadPass("library", {(T, 0): log_of((a, 1)), (T, 1): {1: a.payloads[0]}})
    assert kinds(check([a], [other_partition])) == {"unexpected": 1}


def test_reads_that_disagree() -> None:
    a, u = batch("a", OK, 1), batch("u", UNKNOWN)
    library = read(log_of((a, 1), (u, 4)))
    consume = read({**log_of((a, 1)), 4: u.payloads[0], 5: u.payloads[2], 6: u.payloads[1]}, "consume@b1")
    result = check([a, u], [library, consume])
    assert kinds(result) == {"divergent": 2, "torn": 1}
    short = read(log_of((a, 1)), "consume@b2")
    result = check([a, u], [library, short])
    assert kinds(result) == {"read_mismatch": 1}
    (v,) = result.violations
    assert v.sources == ("consume@b2",) and "4..6" in v.detail


def test_an_offset_one_read_could_not_return_is_unreadable_not_a_mismatch() -> None:
    a = batch("a", OK, 1)
    library = read(log_of((a, 1)))
    consume = read({1: a.payloads[0], 2: a.payloads[1]}, "consume@b1", errors={3: "STORAGE_ERROR"})
    assert kinds(check([a], [library, consume])) == {"ack_unreadable": 1, "unreadable": 1}


def test_the_same_finding_in_several_reads_is_reported_once_with_every_source() -> None:
    a = batch("a", OK, 1)
    records = log_of((a, 1))
    del records[3]
    result = check([a], [read(records), read(dict(records), "consume@b1")])
    (v,) = result.violations
    assert v.kind == "lost" and v.sources == ("library", "consume@b1")


def test_every_kind_has_a_description_and_examples_are_bounded() -> None:
    assert set(KINDS) >= {"lost", "duplicate", "failed_present", "partial", "unexpected", "divergent"}
    bs = [batch(f"a{i}", OK, 1 + 3 * i) for i in range(10)]
    result = check(bs, [read({})])
    assert kinds(result) == {"lost": 10}
    assert len(result.examples(per_kind=3)["lost"]) == 3


def test_history_mistakes_are_refused() -> None:
    with pytest.raises(ValueError):
        ProducedBatch("x", T, 0, (b"1",), OK, None)
    with pytest.raises(ValueError):
        ProducedBatch("x", T, 0, (b"1",), FAILED, 3)
    with pytest.raises(ValueError):
        ProducedBatch("x", T, 0, (b"1",), "lost", None)
    twice = ProducedBatch("y", T, 0, (b"1",), FAILED)
    with pytest.raises(ValueError, match="sent twice"):
        check([ProducedBatch("x", T, 0, (b"1",), FAILED), twice], [])


# -- produce answers -> outcomes ---------------------------------------------------------------

GROUPS = [(T, 0, [b"a", b"b"]), (T, 1, [b"c"]), (T, 2, [b"d"])]


def ok_result(start: int) -> dict:
    return {"topic": T, "partition": 0, "ok": True, "start_offset": start, "end_offset": start, "count": 1}


def err_result(error_type: str) -> dict:
    return {"topic": T, "partition": 0, "ok": False, "count": 1, "error_type": error_type, "error": "x",
            "retriable": True}


def outcomes(status, doc, detail: str = "") -> list[tuple[str, int | None]]:
    return [(o, s) for o, s, _ in classify_produce_reply(status, doc, GROUPS, detail)]


def test_classify_200_acknowledges_every_batch_at_its_offsets() -> None:
    doc = {"results": [ok_result(1), ok_result(7), ok_result(3)]}
    assert outcomes(200, doc) == [(OK, 1), (OK, 7), (OK, 3)]


def test_classify_409_per_batch_and_outcome_unknown_is_unknown() -> None:
    doc = {"results": [ok_result(5), err_result("OutcomeUnknown"), err_result("MetadataStoreError")],
           "error_type": "AppendFailed"}
    assert outcomes(409, doc) == [(OK, 5), (UNKNOWN, None), (FAILED, None)]


def test_classify_refusals_before_anything_was_written_as_failed() -> None:
    back_pressure = {"results": [err_result("BackPressureRejected")] * 3, "error_type": "BackPressureRejected"}
    assert outcomes(503, back_pressure) == [(FAILED, None)] * 3
    assert outcomes(503, {"error_type": "ShuttingDown", "error": "x"}) == [(FAILED, None)] * 3
    assert outcomes(400, {"error_type": "InvalidRequest"}) == [(FAILED, None)] * 3
    assert outcomes(None, None, "ConnectionRefusedError") == [(FAILED, None)] * 3


def test_classify_lost_answers_timeouts_and_bugs_as_unknown() -> None:
    assert outcomes(0, None, "RemoteDisconnected") == [(UNKNOWN, None)] * 3
    assert outcomes(504, {"error_type": "Timeout"}) == [(UNKNOWN, None)] * 3
    assert outcomes(500, {"error_type": "InternalError"}) == [(UNKNOWN, None)] * 3
    assert outcomes(200, {"results": [ok_result(1)]}) == [(UNKNOWN, None)] * 3  # not one result per batch


# -- a read that followed the log while it was faulted -----------------------------------------


def test_an_incomplete_read_is_not_expected_to_hold_everything() -> None:
    a, b = batch("a", OK, 1), batch("b", OK, 4)
    full = read(log_of((a, 1), (b, 4)))
    tail = ReadPass("tail", {(T, 0): {1: a.payloads[0], 2: a.payloads[1]}}, complete=False)
    assert check([a, b], [full, tail]).ok


def test_what_an_incomplete_read_saw_must_stay_in_the_log_even_for_unknown_batches() -> None:
    a, u = batch("a", OK, 1), batch("u", UNKNOWN)
    full = read(log_of((a, 1)))
    tail = ReadPass("tail", {(T, 0): log_of((a, 1), (u, 4))}, complete=False)
    result = check([a, u], [full, tail])
    assert kinds(result) == {"read_mismatch": 1}
    assert result.violations[0].sources == ("library",)


def test_an_incomplete_read_still_finds_wrong_values_and_failed_batches() -> None:
    a, f = batch("a", OK, 1), batch("f", FAILED)
    full = read(log_of((a, 1)))
    swapped = ReadPass("tail", {(T, 0): {1: a.payloads[1], 2: a.payloads[0]}}, complete=False)
    assert kinds(check([a], [full, swapped])) == {"wrong_offset": 1, "divergent": 2}
    failed_seen = ReadPass("tail", {(T, 0): {4: f.payloads[0]}}, complete=False)
    assert kinds(check([a, f], [full, failed_seen])) == {"failed_present": 1, "read_mismatch": 1}


# -- retries and attempts in flight (the simulator's histories) --------------------------------


def retry(b: ProducedBatch, bid: str, outcome: str, start: int | None = None) -> ProducedBatch:
    return replace(b, batch_id=bid, outcome=outcome, start_offset=start, retry_of=b.batch_id)


def test_a_retried_batch_may_be_in_the_log_once_per_attempt_that_did_not_fail() -> None:
    first = batch("a", UNKNOWN)
    again = retry(first, "a2", OK, 4)
    assert check([first, again], [read(log_of((first, 1), (again, 4)))]).ok
    assert check([first, again], [read(log_of((again, 4)))]).ok
    failed_again = retry(first, "a2", FAILED)
    assert kinds(check([first, failed_again], [read(log_of((first, 1), (first, 4)))])) == {"duplicate": 1}
    third = retry(again, "a3", FAILED)
    assert kinds(check([first, again, third], [read(log_of((first, 1), (first, 4), (first, 7)))])) == {
        "duplicate": 1}


def test_a_copy_of_a_retried_batch_in_part_or_torn() -> None:
    first = batch("a", UNKNOWN, n=3)
    again = retry(first, "a2", UNKNOWN)
    records = log_of((first, 1), (again, 4))
    del records[6]
    assert kinds(check([first, again], [read(records)])) == {"partial": 1}
    torn = {**log_of((first, 1)), 4: first.payloads[0], 5: first.payloads[2], 6: first.payloads[1]}
    assert kinds(check([first, again], [read(torn)])) == {"torn": 1}


def test_the_same_payloads_without_retry_of_are_a_harness_mistake() -> None:
    a = batch("a", UNKNOWN)
    with pytest.raises(ValueError, match="sent twice"):
        check([a, replace(a, batch_id="b")], [])


def test_an_attempt_in_flight_may_be_in_the_log() -> None:
    live = Attempt("w0#0", "w0", (T, 0), (b"w0-0-0-0", b"w0-0-0-1"))  # the simulator's, mid-append
    assert live.outcome is None
    assert check([live], [read({1: live.payloads[0], 2: live.payloads[1]})]).ok
    assert check([live], [read({})]).ok
    assert kinds(check([live], [read({1: live.payloads[0]})])) == {"partial": 1}


def test_a_read_says_nothing_about_partitions_it_did_not_read() -> None:
    a = batch("a", OK, 1, partition=1)
    assert check([a], [read({})]).ok
    assert kinds(check([a], [read({}, partition=1)])) == {"lost": 1}


def test_scans_return_offsets_in_order_to_the_high_watermark() -> None:
    tp = (T, 0)
    assert check_order("iter_from", tp, [1, 2, 3], 3) == []
    assert check_order("iter_from", tp, [], 0) == []
    for offsets, hw in (([1, 3], 3), ([1, 2], 3), ([2, 1], 2), ([1, 1, 2], 2), ([], 1)):
        (v,) = check_order("iter_from", tp, offsets, hw)
        assert v.kind == "out_of_order" and v.sources == ("iter_from",), offsets
    # Batches may start over delivered offsets (an entry overlapping them), never after the next one.
    assert check_spans("scan_batches", tp, [(1, 3), (2, 5), (6, 6)], 6) == []
    assert [v.kind for v in check_spans("scan_batches", tp, [(1, 3), (5, 6)], 6)] == ["out_of_order"]
    assert [v.kind for v in check_spans("scan_batches", tp, [(1, 3)], 6)] == ["out_of_order"]


class Live:
    """The attempts of a simulated run, as ``Tracker`` looks them up."""

    def __init__(self, *batches: ProducedBatch) -> None:
        self.batches = list(batches)

    def attempts_of(self, tp, value):
        return [b for b in self.batches if b.tp == tp and value in b.payloads]


def test_tracker_one_value_per_offset_forever() -> None:
    a, u = batch("a", OK, 1), batch("u", UNKNOWN)
    t = Tracker(Live(a, u).attempts_of)
    assert t.acknowledged(a) == []
    assert t.observe((T, 0), 1, a.payloads[0], "r1") == []
    assert t.observe((T, 0), 4, u.payloads[0], "r1") == []
    (lost,) = t.observe((T, 0), 2, a.payloads[0], "r2")
    assert (lost.kind, lost.batch_id, lost.sources) == ("lost", "a", ("r2",))
    (divergent,) = t.observe((T, 0), 4, u.payloads[1], "r2")
    assert divergent.kind == "divergent" and "r1 saw" in divergent.detail


def test_tracker_acknowledgements() -> None:
    a, b, c = batch("a", OK, 1), batch("b", OK, 3), batch("c", OK, 7)
    t = Tracker(Live(a, b, c).attempts_of)
    t.acknowledged(a)
    assert [v.kind for v in t.acknowledged(b)] == ["ack_overlap", "lost"]  # offset 3 is a's
    assert t.observe((T, 0), 8, b"stranger", "r1")[0].kind == "unexpected"
    assert [v.kind for v in t.acknowledged(c)] == ["lost"]  # r1 saw another value at 8


def test_tracker_values_of_failed_or_foreign_attempts() -> None:
    f, a = batch("f", FAILED), batch("a", OK, 1, partition=1)
    t = Tracker(Live(f, a).attempts_of)
    assert [v.kind for v in t.observe((T, 0), 1, f.payloads[0], "r")] == ["failed_present"]
    assert [v.kind for v in t.observe((T, 0), 2, a.payloads[0], "r")] == ["unexpected"]  # sent to partition 1


def test_outcomes_are_one_vocabulary() -> None:
    assert [o.value for o in Outcome] == ["ok", "failed", "unknown"] and (OK, FAILED, UNKNOWN) == tuple(Outcome)
    assert is_unknown_outcome(OutcomeUnknown("maybe")) and not is_unknown_outcome(MetadataStoreError("no"))
    assert set(KINDS) >= {"out_of_order", "ack_overlap", "wrong_offset", "read_mismatch"}


def test_a_consumer_group_that_skipped_a_record_or_died_is_a_violation() -> None:
    from types import SimpleNamespace

    from testing._chaos_groups import GroupConsumers

    cluster = SimpleNamespace(topic="t", partitions=2, kafka_bootstrap="unused")
    group = GroupConsumers(cluster, threading.Event(), 2, seed=1)
    group.records[("t", 0)].update({o: b"v" for o in range(3, 9)})  # 1-2 went to retention: the start is 3
    group.records[("t", 1)].update({1: b"a", 2: b"b", 4: b"d"})  # 3 was never given to the group
    assert group.check({0: 8, 1: 4}, {0: 3, 1: 1}) == [
        Violation("group_skipped", "t", 1, 3, None, "1 of the offsets 1-4 never given to group 'chaos-1' (first [3])")]
    group.records[("t", 1)][3] = b"c"
    assert group.check({0: 8, 1: 4}, {0: 3, 1: 1}) == []
    group.fatal.append("consumer 0: FENCED_INSTANCE_ID")
    assert [v.kind for v in group.check({0: 8, 1: 4}, {0: 3, 1: 1})] == ["group_fatal"]


def test_a_consumer_group_that_never_reached_the_end_is_a_violation_even_when_retention_took_the_rest() -> None:
    """A group stuck (say, on an empty assignment) skips nothing once retention has moved the
    log start past every record; it is still behind."""
    from types import SimpleNamespace

    from testing._chaos_groups import GroupConsumers

    group = GroupConsumers(SimpleNamespace(topic="t", partitions=2, kafka_bootstrap="unused"), threading.Event(), 2,
                           seed=1)
    group.records[("t", 0)].update({o: b"v" for o in range(5, 9)})
    assert group.check({0: 8, 1: 6}, {0: 9, 1: 7}) == [
        Violation("group_behind", "t", 1, 0, None, "group 'chaos-1' read up to offset 0 of 6")]
    assert group.check({0: 8, 1: 0}, {0: 9, 1: 1}) == []  # an empty partition has no end to reach


def test_a_follower_whose_client_moved_to_the_log_start_past_its_records_reached_the_end() -> None:
    """Retention took what a follower had not read while the faults' end stopped it: its client
    resets to the log start (its position), which is the end; a follower with no position there
    is still behind, and a record from the log start on that it was never given is skipped."""
    records = {("t", 0): {1: b"a", 2: b"b"}, ("t", 1): {1: b"a"}}
    hws, starts = {0: 9, 1: 9}, {0: 10, 1: 8}
    assert behind(records, "t", hws, {0: 9, 1: 9}) is False
    assert follower_gaps("f", "the follower", records, "t", hws, starts, {0: 9, 1: 9}) == [
        Violation("f_skipped", "t", 1, 8, None, "2 of the offsets 8-9 never given to the follower (first [8, 9])")]
    assert behind(records, "t", hws, {}) is True
    assert [v.kind for v in follower_gaps("f", "the follower", records, "t", hws, starts, {0: 9})] == [
        "f_behind", "f_skipped"]


def test_a_member_given_nothing_since_it_got_a_partition_is_where_librdkafka_fetches_it_from() -> None:
    """librdkafka's position stays unset until a partition gives its member a record; where
    retention left nothing to give, its statistics say where it fetches from (an active fetch,
    nothing fetched waiting). A fetch not yet active, or with records waiting, says nothing."""
    import json
    from types import SimpleNamespace

    from testing._chaos_groups import GroupConsumers

    class Member:
        def __init__(self, positions: dict[int, int]) -> None:
            self._positions = positions

        def assignment(self) -> list[SimpleNamespace]:
            return [SimpleNamespace(partition=p) for p in self._positions]

        def position(self, tps: list[SimpleNamespace]) -> list[SimpleNamespace]:
            return [SimpleNamespace(partition=tp.partition, offset=self._positions[tp.partition]) for tp in tps]

    group = GroupConsumers(SimpleNamespace(topic="t", partitions=4, kafka_bootstrap="unused"), threading.Event(), 1,
                           seed=1)
    group._consumers = [Member({0: 7, 1: -1001, 2: -1001, 3: -1001})]
    part = {"fetch_state": "active", "next_offset": 9, "fetchq_cnt": 0}
    group.on_stats(0, json.dumps({"topics": {"t": {"partitions": {
        "0": {**part, "next_offset": 12, "fetchq_cnt": 5},  # its position (7) is what it was given
        "1": part,  # given nothing since it got it: fetched from 9, nothing waiting
        "2": {**part, "fetchq_cnt": 3},  # records fetched, not yet consumed
        "3": {**part, "fetch_state": "offset-query"},
        "-1": part}}, "u": {"partitions": {"3": part}}}}))
    assert group.positions() == {0: 7, 1: 9}
    records = {("t", p): {} for p in range(4)}
    assert not behind(records, "t", {1: 9}, group.positions())
    assert behind(records, "t", {1: 9, 2: 9}, group.positions())
