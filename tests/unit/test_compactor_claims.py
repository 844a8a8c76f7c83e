"""The compactor service's claims (claims.py, through the task runner) over the fakes:
taken for a run and released, never another's, never blocked by our own leftovers."""

from __future__ import annotations

from collections import Counter

import pytest

from server._errors import MetadataStoreError
from server._protocol.records import CompactorClaim
from server._storage.metastore import EXPECT_ABSENT, InMemoryMetadataStore
from server._storage.objectstore import InMemoryObjectStore
from server.leaderless_log_compactor import CompactionOutcome

from ._compactor_service_fakes import A, B, FakeCompactor, claim_key, result, service


@pytest.fixture
def meta():
    return InMemoryMetadataStore()


@pytest.fixture
def objs():
    return InMemoryObjectStore()


# -- claims --------------------------------------------------------------------------------


def test_claim_is_taken_for_the_run_and_released(meta, objs):
    seen = []

    def behaviour(tp):
        rec = meta.get(claim_key(tp), str(tp))
        seen.append(CompactorClaim.decode(rec.value))
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        res = svc.attempt(A)
    assert res.outcome == "compacted"
    assert seen[0].compactor_id == "me" and seen[0].claimed_at_ms > 0
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_claims_total", result="won") == 1
    assert svc.metrics.counter("compactor_claim_releases_total", outcome="released") == 1


def test_log_claimed_by_another_compactor_is_skipped_as_busy(meta, objs):
    other = CompactorClaim("other", 1).encode()
    meta.put(claim_key(A), other, str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        assert svc.attempt(A).outcome == "busy"
        assert svc.attempt(B).outcome == "nothing_to_do"
    assert fake.calls == Counter({B: 1})
    assert meta.get(claim_key(A), str(A)).value == other  # untouched
    assert svc.metrics.counter("compactor_claims_total", result="lost") == 1
    assert svc.metrics.counter("compactor_tasks_total", outcome="busy") == 1


def test_release_never_deletes_another_compactors_claim(meta, objs):
    """Our session expired mid-run and someone else claimed the log: leave theirs."""

    def behaviour(tp):
        meta.delete(claim_key(tp), str(tp))
        meta.put(claim_key(tp), CompactorClaim("other", 2).encode(), str(tp), expected_version=EXPECT_ABSENT)
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        assert svc.attempt(A).outcome == "compacted"
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.metrics.counter("compactor_claim_releases_total", outcome="not_ours") == 1


class LostReplyStore(InMemoryMetadataStore):
    """Applies the next claim put, then reports a transport error (unknown outcome)."""

    def __init__(self):
        super().__init__()
        self.lose_next_claim = True

    def put(self, key, value, partition_key, expected_version=None, ephemeral=False):
        version = super().put(key, value, partition_key, expected_version, ephemeral)
        if self.lose_next_claim and key.endswith("/compactor-claim"):
            self.lose_next_claim = False
            raise MetadataStoreError("deadline exceeded")
        return version


def test_claim_with_unknown_outcome_is_ours_if_it_names_us(objs):
    meta = LostReplyStore()
    with service(meta, objs) as svc:
        assert svc.attempt(A).outcome == "nothing_to_do"
    assert meta.get(claim_key(A), str(A)) is None  # resolved as ours, then released


def test_claim_that_failed_outright_is_an_error(meta, objs):
    meta.fail_next("put", key_contains="compactor-claim")
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        res = svc.attempt(A)
    assert res.outcome == "error" and "claim failed" in res.error
    assert fake.calls == Counter()


def test_compaction_errors_are_contained_and_the_claim_released(meta, objs):
    def behaviour(tp):
        raise MetadataStoreError("Oxia is down")

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        res = svc.attempt(A)
    assert res.outcome == "error" and "Oxia is down" in res.error
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_task_errors_total", error="MetadataStoreError") == 1


# -- our own claims never block us -------------------------------------------------------------------


class OutageStore(InMemoryMetadataStore):
    """Every call fails while ``down`` is set, as when Oxia is killed; the data
    (and our ephemeral claims: the session outlives a short outage) stay."""

    def __init__(self):
        super().__init__()
        self.down = False

    def _enter(self, op, key=""):
        if self.down:
            self.calls[op] = self.calls.get(op, 0) + 1
            raise MetadataStoreError(f"Oxia is down ({op} of {key!r})")
        return super()._enter(op, key)


def test_after_an_oxia_outage_our_leftover_claim_does_not_make_the_log_busy(objs):
    """The release fails during the outage; afterwards the log is compacted again, not busy forever."""
    meta = OutageStore()
    runs = []

    def behaviour(tp):
        runs.append(tp)
        if len(runs) == 1:
            meta.down = True  # Oxia dies mid-run: the run fails and so does the release
            raise MetadataStoreError("Oxia is down")
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        first = svc.attempt(A)
        assert first.outcome == "error"
        assert svc.metrics.counter("compactor_claim_releases_total", outcome="error") == 1
        meta.down = False  # Oxia is back; our session, and the claim, survived
        assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "me"
        assert [svc.attempt(A).outcome for _ in range(3)] == ["compacted"] * 3
    assert runs == [A] * 4
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.unreleased_claims() == {}
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="released") == 1
    assert svc.metrics.counter("compactor_tasks_total", outcome="busy") == 0
    assert svc.metrics.snapshot()["gauges"]["compactor_unreleased_claims"] == {"": 0}


def test_a_release_retry_that_fails_again_stays_remembered(objs):
    meta = OutageStore()
    fake = FakeCompactor(lambda tp: result(tp, CompactionOutcome.COMPACTED))
    with service(meta, objs, fake) as svc:
        meta.fail_next("delete", key_contains="compactor-claim")
        assert svc.attempt(A).outcome == "compacted"
        version = svc.unreleased_claims()[A]
        assert svc.metrics.snapshot()["gauges"]["compactor_unreleased_claims"] == {"": 1}
        meta.down = True
        res = svc.attempt(A)
        assert res.outcome == "error" and "claim failed" in res.error
        assert svc.unreleased_claims() == {A: version}
        meta.down = False
        assert svc.attempt(A).outcome == "compacted"
    assert fake.calls == Counter({A: 2})
    assert svc.unreleased_claims() == {} and meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="error") == 1
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="released") == 1


def test_a_remembered_release_leaves_a_claim_someone_else_took_alone(meta, objs):
    """Our session expired after the failed release and another compactor claimed the log."""
    with service(meta, objs) as svc:
        meta.fail_next("delete", key_contains="compactor-claim")
        svc.attempt(A)
        version = svc.unreleased_claims()[A]
        meta.delete(claim_key(A), str(A), expected_version=version)  # the session expired
        meta.put(claim_key(A), CompactorClaim("other", 5).encode(), str(A), expected_version=EXPECT_ABSENT)
        assert svc.attempt(A).outcome == "busy"
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.unreleased_claims() == {}
    assert svc.metrics.counter("compactor_claim_release_retries_total", outcome="not_ours") == 1


def test_a_claim_naming_us_that_this_process_does_not_remember_is_taken_back(meta, objs):
    """E.g. a create whose reply was lost and whose read-back failed too, or
    an earlier process with the same compactor_id: never busy on ourselves."""
    meta.put(claim_key(A), CompactorClaim("me", 1).encode(), str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    seen = []

    def behaviour(tp):
        seen.append(CompactorClaim.decode(meta.get(claim_key(tp), str(tp)).value))
        return result(tp, CompactionOutcome.COMPACTED)

    with service(meta, objs, FakeCompactor(behaviour)) as svc:
        assert svc.attempt(A).outcome == "compacted"
    assert seen[0].compactor_id == "me" and seen[0].claimed_at_ms > 1  # a fresh claim of this run
    assert meta.get(claim_key(A), str(A)) is None
    assert svc.metrics.counter("compactor_leftover_claims_total", outcome="deleted") == 1
    assert svc.metrics.counter("compactor_claims_total", result="won") == 1


class SnatchingStore(InMemoryMetadataStore):
    """Another compactor replaces the claim between our read and our delete."""

    def delete(self, key, partition_key, expected_version=None):
        if key.endswith("/compactor-claim") and expected_version is not None:
            super().delete(key, partition_key)
            super().put(key, CompactorClaim("other", 9).encode(), partition_key, expected_version=EXPECT_ABSENT)
        return super().delete(key, partition_key, expected_version)


def test_our_leftover_is_deleted_only_at_the_version_read(objs):
    meta = SnatchingStore()
    meta.put(claim_key(A), CompactorClaim("me", 1).encode(), str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    fake = FakeCompactor()
    with service(meta, objs, fake) as svc:
        assert svc.attempt(A).outcome == "busy"
    assert fake.calls == Counter()
    assert CompactorClaim.decode(meta.get(claim_key(A), str(A)).value).compactor_id == "other"
    assert svc.metrics.counter("compactor_leftover_claims_total", outcome="changed") == 1


def test_an_unreadable_claim_is_never_taken_for_ours(meta, objs):
    meta.put(claim_key(A), b"not json", str(A), expected_version=EXPECT_ABSENT, ephemeral=True)
    with service(meta, objs) as svc:
        assert svc.attempt(A).outcome == "busy"
    assert meta.get(claim_key(A), str(A)).value == b"not json"
