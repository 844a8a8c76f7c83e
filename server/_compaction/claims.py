"""Claims: one compactor per log at a time (SPEC 7.8), as this service keeps them.

A claim is an ephemeral ``meta/compactor-claim`` record naming the
``compactor_id``, created if absent before a run and deleted, conditional on
its version, after it.

A claim this service itself holds never blocks it. The scheduler runs at
most one task per log in this process, so when a worker starts on a log a
claim naming our ``compactor_id`` can only be a leftover of ours: a release
that failed (Oxia was down; our session outlived the outage, so the claim
would never expire), or a create whose reply was lost. The claim create then
deletes that leftover, conditional on the version it read, and creates the
claim again. A failed release is also remembered and retried (a conditional
delete) before the next run on that log.
"""

from __future__ import annotations

import logging
import threading

from .._errors import LlogError, MetadataStoreError, VersionConflict
from .._protocol.keys import PartitionKeys, TopicPartition
from .._protocol.records import CompactorClaim
from .._storage.metastore import EXPECT_ABSENT, MetadataStore
from .._metrics import LlogMetrics
from .._runtime import REAL_RUNTIME, Runtime

__all__ = ["Claims"]

log = logging.getLogger(__name__)


class Claims:
    """The claims of one compactor (``compactor_id``) over one metadata store.

    Thread-safe: workers claim and release different logs concurrently; the
    set of failed releases is shared.
    """

    def __init__(
        self, meta: MetadataStore, compactor_id: str, metrics: LlogMetrics, *, runtime: Runtime = REAL_RUNTIME,
    ) -> None:
        self._meta = meta
        self._clock = runtime.clock
        self.compactor_id = compactor_id
        self.metrics = metrics
        # Claims whose release failed: log -> the version our create returned.
        self._unreleased: dict[TopicPartition, int] = {}
        self._unreleased_lock = threading.Lock()

    def claim(self, keys: PartitionKeys) -> int | None:
        """Create the ephemeral claim; its version, or None if another compactor holds it."""
        claim = CompactorClaim(self.compactor_id, self._clock.now_ms())
        # Three creates at most: the first may find a leftover of ours, which
        # is deleted; the second may race another compactor's create.
        for _ in range(3):
            try:
                version = self._meta.put(
                    keys.compactor_claim, claim.encode(), keys.partition_key,
                    expected_version=EXPECT_ABSENT, ephemeral=True,
                )
            except VersionConflict:
                rec = self._meta.get(keys.compactor_claim, keys.partition_key)
                if rec is None:
                    continue  # released meanwhile: create again
                if not self._names_us(rec.value):
                    break
                self._drop_leftover(keys, rec.version)
                continue
            except MetadataStoreError as exc:
                # Unknown outcome (SPEC 7.8): it is ours if the claim there names us.
                rec = self._meta.get(keys.compactor_claim, keys.partition_key)
                if rec is None:
                    raise
                if not self._names_us(rec.value):
                    break
                log.info("claim of %s had an unknown outcome (%s) and turned out to be ours", keys.tp, exc)
                version = rec.version
            self.metrics.inc("compactor_claims_total", result="won")
            return version
        self.metrics.inc("compactor_claims_total", result="lost")
        return None

    def _names_us(self, value: bytes) -> bool:
        """Whether a claim is this service's own (see the module docstring).

        The claim's ``compactor_id`` decides. ``oxia==0.2.1``'s ``get`` does
        return the record's session id and client identity, but the client
        has no public way to tell our own session id on a shard, and
        ``MetadataStore.get`` keeps only the version. A session match is not
        needed either: with one task per log in this process, a claim naming
        us is held by no run of ours, and one left by an earlier process with
        the same id (or a misconfigured twin) only costs a duplicate run if
        taken over, which ``compact_once`` tolerates (SPEC 7.8).
        """
        try:
            return CompactorClaim.decode(value).compactor_id == self.compactor_id
        except LlogError:
            return False  # unreadable: not provably ours, so never deleted

    def _drop_leftover(self, keys: PartitionKeys, version: int) -> None:
        """Delete a claim of ours no run of this process holds, conditional on
        the version just read (a concurrent change makes it someone else's)."""
        try:
            deleted = self._meta.delete(keys.compactor_claim, keys.partition_key, expected_version=version)
        except VersionConflict:
            deleted = False
        log.warning(
            "found our own leftover claim of %s (version %d; an earlier release failed or its reply was lost); "
            "%s", keys.tp, version, "deleted it" if deleted else "it changed meanwhile",
        )
        self.metrics.inc("compactor_leftover_claims_total", outcome="deleted" if deleted else "changed")
        self._forget_unreleased(keys.tp)

    def release(self, keys: PartitionKeys, version: int) -> None:
        """Delete our claim, conditional on its version (never someone else's).

        A release that fails is remembered and retried before the next run on
        the log (:meth:`retry_release`): Oxia may be back while our session, and
        with it the claim, survived the outage.
        """
        try:
            if self._meta.delete(keys.compactor_claim, keys.partition_key, expected_version=version):
                self.metrics.inc("compactor_claim_releases_total", outcome="released")
            else:
                self.metrics.inc("compactor_claim_releases_total", outcome="gone")
        except VersionConflict:
            # Our session expired meanwhile and another compactor claimed the log.
            self.metrics.inc("compactor_claim_releases_total", outcome="not_ours")
            log.info("claim of %s is no longer ours; left alone", keys.tp)
        except LlogError as exc:
            self.metrics.inc("compactor_claim_releases_total", outcome="error")
            with self._unreleased_lock:
                self._unreleased[keys.tp] = version
                pending = len(self._unreleased)
            self.metrics.set_gauge("compactor_unreleased_claims", pending)
            log.warning("cannot release the claim of %s (version %d); retrying before its next run: %s",
                        keys.tp, version, exc)

    def retry_release(self, keys: PartitionKeys) -> None:
        """Delete a claim whose release failed earlier, conditional on its
        version; raises (keeping it remembered) if Oxia still fails."""
        with self._unreleased_lock:
            version = self._unreleased.get(keys.tp)
        if version is None:
            return
        try:
            deleted = self._meta.delete(keys.compactor_claim, keys.partition_key, expected_version=version)
            outcome = "released" if deleted else "gone"
        except VersionConflict:
            outcome = "not_ours"  # our session expired and someone else claimed the log
        except LlogError:
            self.metrics.inc("compactor_claim_release_retries_total", outcome="error")
            raise
        self.metrics.inc("compactor_claim_release_retries_total", outcome=outcome)
        log.info("retried the release of the claim of %s (version %d): %s", keys.tp, version, outcome)
        self._forget_unreleased(keys.tp)

    def _forget_unreleased(self, tp: TopicPartition) -> None:
        with self._unreleased_lock:
            self._unreleased.pop(tp, None)
            pending = len(self._unreleased)
        self.metrics.set_gauge("compactor_unreleased_claims", pending)

    def unreleased(self) -> dict[TopicPartition, int]:
        """Logs whose claim release failed and is still to be retried -> claim version."""
        with self._unreleased_lock:
            return dict(self._unreleased)
