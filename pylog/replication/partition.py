"""One replica of one partition, as leader or follower (Kafka's ``Partition`` + ``Replica``).

Sans-I/O: every method takes ``now_ms`` from its caller and returns what must
be sent; the only I/O is the replica's own :class:`pylog.storage.log.Log`.

Leader rules (research §3.2-3.7, Kafka's Partition.scala):

* a follower's fetch offset *is* its log end offset (LEO);
  ``last_caught_up_ms`` follows ``Replica.updateFetchStateOrThrow``;
* a follower is out of sync unless its LEO equals the leader's or it caught up
  within ``replica_lag_time_max_ms``; the leader proposes ISR changes to the
  controller (AlterPartition), one at a time; during a pending change the
  *maximal* ISR (old ISR plus any member being added) is used for the HW;
* a follower may rejoin once its LEO reaches both the HW and the start offset
  of the leader's current epoch (KAFKA-7128);
* HW = min LEO over the maximal ISR; it never moves back and does not
  advance while the ISR is smaller than ``min(min_insync_replicas, RF)``
  (KAFKA-15583).

Follower rules: on every new leader epoch the follower first truncates by
OffsetsForLeaderEpoch with KIP-279's iteration (never to its HW), then fetches
from its LEO; its HW is ``min(leader HW, own LEO)``. An append or truncation that fails on
the follower raises nothing: the replica stops fetching (``FAILED``, :meth:`Partition.fail_fetching`)
with its bookkeeping matched to its log, and leaves the ISR by the lag rule.

Deviation from Kafka: the HW only waits for ISR members, not for caught-up
non-ISR replicas (Kafka's "ISR-eligible" extension of maybeIncrementLeaderHW).

Complexity: O(replicas) per request plus the log's own cost.
Durability: the HW is checkpointed by :class:`ReplicaManager`
(``replication-offset-checkpoint``); the epoch cache and the idempotent-producer
state (validated and kept by the log: :meth:`pylog.storage.log.Log.append_as_leader`) by the log.
Thread-safety: none; one scheduler thread drives it.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence, Set, Tuple

from pylog.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidOffsetError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PylogError,
    UnknownLeaderEpochError,
)
from pylog.replication.messages import (
    ACKS_ALL,
    NO_LEADER,
    AlterPartitionRequest,
    AlterPartitionResponse,
    FetchRequest,
    FetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    PartitionState,
)
from pylog.storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from pylog.storage.log import AppendResult, Log
from pylog.storage.producer_state import ProducerStateManager

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"
TRUNCATING = "truncating"
_logger = logging.getLogger(__name__)
FETCHING = "fetching"
#: a follower that stopped fetching after an append or truncation failed (Kafka's fetcher
#: ``markPartitionFailed``); see :meth:`Partition.fail_fetching`
FAILED = "failed"


class ReplicaState:
    """The leader's view of one follower (Kafka's ``Replica``)."""

    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "incarnation")

    def __init__(self, last_caught_up_ms: int):
        self.log_end_offset = -1
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0
        #: the follower incarnation of the latest fetch (-1: unknown)
        self.incarnation = -1

    def update(self, fetch_offset: int, now_ms: int, leader_leo: int) -> None:
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


class Partition:
    """Leader or follower state of one partition on one broker.

    ``truncate_to_hw_on_become_follower`` is a *test-only* switch restoring
    Kafka's pre-0.11 behaviour (truncate to the local HW when becoming a
    follower), under which KIP-101's scenarios lose or diverge data.
    """

    truncate_to_hw_on_become_follower: bool = False

    def __init__(self, broker_id: int, log: Log, *, high_watermark: int = 0, replica_lag_time_max_ms: int = 30_000):
        self.broker_id = broker_id
        self.log = log
        self.topic, self.partition = log.topic, log.partition
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.high_watermark = max(0, min(high_watermark, log.log_end_offset))
        self.role = NONE
        self.follower_state = TRUNCATING
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: Tuple[int, ...] = ()
        self.isr: Set[int] = set()
        self.min_insync_replicas = 1
        self.pending_isr: Optional[Set[int]] = None
        self.pending_since_ms = 0
        #: replicas this leader proposed to add whose outcome it has not learnt: the controller may
        #: have committed them even if the reply was lost, so the HW waits for them too (they stay
        #: in the maximal ISR until a newer ISR from the controller is adopted)
        self.unconfirmed_additions: Set[int] = set()
        #: the AlterPartition in flight (resent unchanged until answered)
        self._proposal: Optional[AlterPartitionRequest] = None
        self.remote: Dict[int, ReplicaState] = {}
        self.leader_epoch_start_offset = 0
        self.truncations = 0
        #: committed ISR changes this replica made as leader (AlterPartition accepted)
        self.isr_shrinks = 0
        self.isr_expands = 0
        log.producer_state  # loaded now (from ``.snapshot`` + log replay), as a replica serves producers
        #: fetch responses whose bytes failed the follower's check (CRC, framing); the replica
        #: manager backs off after one, as Kafka's fetcher does for a partition in error
        self.corrupt_fetches = 0
        #: why this follower stopped fetching (None: it did not); see :meth:`fail_fetching`
        self.fetch_failure: Optional[str] = None
        #: the failure was the disk's (KafkaStorageError / OSError): sticky until the broker restarts
        self.storage_failed = False

    # ------------------------------------------------------------ properties
    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state, which the log owns (:attr:`pylog.storage.log.Log.producer_state`)."""
        return self.log.producer_state

    @property
    def last_stable_offset(self) -> int:
        """The LSO: what a read_committed fetch may read up to (:meth:`pylog.storage.log.Log.last_stable_offset`
        of this replica's HW). O(ongoing + unreplicated transactions)."""
        return self.log.last_stable_offset(self.high_watermark)

    @property
    def duplicates(self) -> int:
        """Produce requests answered as retries of a batch already in the log (nothing appended)."""
        return self.log.duplicate_appends_total

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    @property
    def maximal_isr(self) -> Set[int]:
        if self.pending_isr is None and not self.unconfirmed_additions:
            return set(self.isr)  # the usual case: one copy, not two unions
        return self.isr | (self.pending_isr or set()) | self.unconfirmed_additions

    @property
    def effective_min_isr(self) -> int:
        n = len(self.replicas) or 1  # min(min_insync_replicas, max(1, replicas)) without two calls
        m = self.min_insync_replicas
        return m if m < n else n

    @property
    def tp(self) -> Tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition}@{self.broker_id} {self.role} epoch={self.leader_epoch} "
            f"leader={self.leader} isr={sorted(self.isr)} hw={self.high_watermark} leo={self.log_end_offset})"
        )

    # ------------------------------------------------------ LeaderAndIsr
    def apply_state(self, st: PartitionState, now_ms: int) -> str:
        """Apply the controller's state; returns "leader", "follower", "isr" or "stale".

        A state with an older leader epoch, or the same epoch and a partition
        epoch not newer than ours, is stale and ignored (KIP-320 fencing).
        """
        if st.leader_epoch < self.leader_epoch:
            return "stale"
        same_epoch = st.leader_epoch == self.leader_epoch
        if same_epoch and st.partition_epoch <= self.partition_epoch and self.role != NONE:
            return "stale"
        self.replicas = tuple(st.replicas)
        self.min_insync_replicas = st.min_insync_replicas
        if st.leader == self.broker_id:
            if same_epoch and self.role == LEADER:
                # The controller's copy of an AlterPartition this leader proposed
                # can arrive before the AlterPartition response: count it here too.
                self._count_isr_change(st.isr)
                self.isr = set(st.isr)
                self.partition_epoch = st.partition_epoch
                self.pending_isr = None
                self.unconfirmed_additions = set()
                self._proposal = None
                for r in self.replicas:
                    if r != self.broker_id and r not in self.remote:
                        self.remote[r] = ReplicaState(0)
                self.maybe_increment_hw(now_ms)
                return "isr"
            self._make_leader(st, now_ms)
            return "leader"
        if same_epoch and self.role == FOLLOWER and st.leader == self.leader:
            self.isr = set(st.isr)
            self.partition_epoch = st.partition_epoch
            return "isr"
        self._make_follower(st)
        return "follower"

    def _make_leader(self, st: PartitionState, now_ms: int) -> None:
        self.role = LEADER
        self.leader = self.broker_id
        self.leader_epoch = st.leader_epoch
        self.partition_epoch = st.partition_epoch
        self.isr = set(st.isr)
        self.pending_isr = None
        self.unconfirmed_additions = set()
        self._proposal = None
        leo = self.log.log_end_offset
        # Kafka's Partition.makeLeader: the new epoch starts at the current LEO.
        try:
            self.log.assign_epoch(st.leader_epoch, leo)
        except (PylogError, OSError) as exc:
            # Only the checkpoint file failed (the cache in memory has the epoch). A replica on a
            # failing disk still leads from its log, which holds every committed record (it was
            # in the ISR); its appends fail and producers get KafkaStorageError until it restarts.
            self.storage_failed = True
            self.fetch_failure = f"leader-epoch checkpoint at offset {leo} failed: {type(exc).__name__}: {exc}"
            _logger.error(
                "%s-%d: broker %d leads epoch %d on a failing disk (leader-epoch checkpoint at offset %d): %s",
                self.topic, self.partition, self.broker_id, st.leader_epoch, leo, exc)
        self.leader_epoch_start_offset = leo
        self.remote = {
            r: ReplicaState(now_ms if r in self.isr else 0) for r in self.replicas if r != self.broker_id
        }
        self.high_watermark = min(self.high_watermark, leo)
        self.maybe_increment_hw(now_ms)

    def _make_follower(self, st: PartitionState) -> None:
        self.role = FOLLOWER
        self.leader = st.leader
        self.leader_epoch = st.leader_epoch
        self.partition_epoch = st.partition_epoch
        self.isr = set(st.isr)
        self.pending_isr = None
        self.unconfirmed_additions = set()
        self._proposal = None
        self.remote = {}
        if self.storage_failed:
            self.follower_state = FAILED  # an offline replica stays offline until its broker restarts
        elif self.truncate_to_hw_on_become_follower:
            self._truncate(self.high_watermark)
            self.follower_state = FETCHING
        else:
            self.follower_state = TRUNCATING  # a new leader or epoch retries a failed partition
            self.fetch_failure = None

    def stop(self) -> None:
        """Stop serving (StopReplica or broker shutdown); the log stays open."""
        self.role = NONE
        self.leader = NO_LEADER
        self.pending_isr = None
        self.unconfirmed_additions = set()
        self._proposal = None
        self.remote = {}

    # ----------------------------------------------------------- leader side
    def _leader_error(self, current_leader_epoch: int) -> Optional[Tuple[type, str]]:
        if self.role != LEADER:
            return NotLeaderError, f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
        if current_leader_epoch >= 0 and current_leader_epoch < self.leader_epoch:
            return FencedLeaderEpochError, (
                f"{self.topic}-{self.partition}: request epoch {current_leader_epoch} < leader epoch {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            return UnknownLeaderEpochError, (
                f"{self.topic}-{self.partition}: request epoch {current_leader_epoch} > leader epoch {self.leader_epoch}"
            )
        return None

    def append_as_leader(self, records: Sequence[object], acks: int, now_ms: int) -> AppendResult:
        """Append a producer's records, stamped with the leader epoch.

        ``records`` is one encoded RecordBatch v2 (bytes-like; Kafka's rule for
        produce requests) or a list of values / Records to encode here. The
        log validates and appends it in one descent
        (:meth:`pylog.storage.log.Log.append_as_leader`): a duplicate of one
        of the producer's last 5 batches is not appended and its original
        offsets are returned (``position`` -1); an out-of-order sequence or a
        fenced epoch raises OutOfOrderSequenceError / InvalidProducerEpochError.

        Raises NotLeaderError, or NotEnoughReplicasError (nothing appended)
        when ``acks`` is all and the ISR is below the effective min ISR.
        """
        if self.role != LEADER:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}")
        if acks == ACKS_ALL and len(self.isr) < self.effective_min_isr:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {sorted(self.isr)} is smaller than "
                f"min_insync_replicas={self.min_insync_replicas}; nothing was appended"
            )
        res = self.log.append_as_leader(records, leader_epoch=self.leader_epoch)  # type: ignore[arg-type]
        self.maybe_increment_hw(now_ms)
        return res

    def append_marker(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                      now_ms: int) -> AppendResult:
        """Append a COMMIT (``committed``) or ABORT marker for ``producer_id`` (WriteTxnMarkers; Kafka's
        ``appendRecordsToLeader`` with origin COORDINATOR and acks=all), stamped with the leader epoch
        (:meth:`pylog.storage.log.Log.append_marker`).

        Raises NotLeaderError; NotEnoughReplicasError (nothing appended) when the ISR is below the
        effective min ISR, as for an acks=all produce; InvalidProducerEpochError /
        TransactionCoordinatorFencedError (an older producer or coordinator epoch than the last one
        seen for the producer; nothing appended); KafkaStorageError. The caller waits for the HW to
        pass the marker before it reports it written.
        """
        if self.role != LEADER:
            raise NotLeaderError(f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}")
        if len(self.isr) < self.effective_min_isr:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition}: ISR {sorted(self.isr)} is smaller than "
                f"min_insync_replicas={self.min_insync_replicas}; the transaction marker was not appended"
            )
        res = self.log.append_marker(producer_id, producer_epoch, committed, coordinator_epoch, self.leader_epoch)
        self.maybe_increment_hw(now_ms)
        return res

    def handle_fetch(self, req: FetchRequest, now_ms: int) -> Tuple[FetchResponse, Optional[AlterPartitionRequest]]:
        """Serve a follower or consumer fetch; may return an ISR expansion to propose."""
        err = self._leader_error(req.current_leader_epoch)
        topic, partition, corr = self.topic, self.partition, req.correlation_id
        if err is not None:
            return FetchResponse(topic, partition, corr, error=err[0], message=err[1], leader_epoch=self.leader_epoch), None
        leo = self.log.log_end_offset
        if req.fetch_offset > leo or req.fetch_offset < self.log.log_start_offset:
            return FetchResponse(
                topic, partition, corr,
                error=OffsetOutOfRangeError,
                message=f"fetch offset {req.fetch_offset} out of range [{self.log.log_start_offset}, {leo}] "
                f"for {self.topic}-{self.partition}",
                high_watermark=self.high_watermark,
                log_start_offset=self.log.log_start_offset,
                log_end_offset=leo,
                leader_epoch=self.leader_epoch,
            ), None
        alter = None
        if req.replica_id >= 0:
            records = self.log.fetch(req.fetch_offset, req.max_bytes) if req.fetch_offset < leo else b""
            st = self.remote.get(req.replica_id)
            if st is not None and req.replica_incarnation < st.incarnation:
                st = None  # a fetch of a previous incarnation (parked before it crashed): stale
            if st is not None:
                st.incarnation = max(st.incarnation, req.replica_incarnation)
                st.update(req.fetch_offset, now_ms, leo)
                alter = self.maybe_expand_isr(req.replica_id, now_ms)
                self.maybe_increment_hw(now_ms)
        elif req.isolation_level == 1:
            # read_committed: only below the LSO, with the aborted transactions among the batches
            lso = self.log.last_stable_offset(self.high_watermark)
            records, aborted = self.log.fetch_committed(req.fetch_offset, req.max_bytes, lso)
            return FetchResponse(
                topic, partition, corr,
                records=records,
                high_watermark=self.high_watermark,
                log_start_offset=self.log.log_start_offset,
                log_end_offset=leo,
                leader_epoch=self.leader_epoch,
                last_stable_offset=lso,
                aborted_transactions=tuple((a.producer_id, a.first_offset) for a in aborted),
            ), None
        else:
            hw = self.high_watermark
            records = self.log.fetch(req.fetch_offset, req.max_bytes, max_offset=hw) if req.fetch_offset < hw else b""
        return FetchResponse(
            topic, partition, corr,
            records=records,
            high_watermark=self.high_watermark,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=leo,
            leader_epoch=self.leader_epoch,
        ), alter

    def handle_offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
        """Answer "where does epoch E end?" with (largest epoch <= E, its end offset)."""
        topic, partition, corr = self.topic, self.partition, req.correlation_id
        err = self._leader_error(req.current_leader_epoch)
        if err is not None:
            return OffsetsForLeaderEpochResponse(topic=topic, partition=partition, correlation_id=corr,
                                                 error=err[0], message=err[1])
        epoch, end = self.log.epochs.end_offset_for(req.leader_epoch, self.log.log_end_offset)
        return OffsetsForLeaderEpochResponse(topic=topic, partition=partition, correlation_id=corr,
                                             leader_epoch=epoch, end_offset=end)

    def is_caught_up(self, replica: int, now_ms: int) -> bool:
        st = self.remote.get(replica)
        if st is None:
            return False
        return st.log_end_offset == self.log.log_end_offset or now_ms - st.last_caught_up_ms <= self.replica_lag_time_max_ms

    def _propose(self, new_isr: Set[int], now_ms: int) -> AlterPartitionRequest:
        self.pending_isr = set(new_isr)
        self.pending_since_ms = now_ms
        self.unconfirmed_additions |= set(new_isr) - self.isr
        added = tuple(sorted((r, self.remote[r].incarnation) for r in set(new_isr) - self.isr if r in self.remote))
        self._proposal = AlterPartitionRequest(
            self.broker_id, self.topic, self.partition, self.leader_epoch, self.partition_epoch, tuple(sorted(new_isr)),
            added_incarnations=added,
        )
        return self._proposal

    def _pending_blocks(self, now_ms: int, retry_after_ms: int) -> bool:
        """One ISR change at a time: a proposal is in flight until it is answered (or superseded by
        a newer ISR from the controller); :meth:`resend_proposal` repeats a lost one."""
        return self.pending_isr is not None

    @property
    def has_proposal(self) -> bool:
        """An AlterPartition proposal of this replica is unanswered (:meth:`resend_proposal` may repeat it)."""
        return self._proposal is not None

    def resend_proposal(self, now_ms: int, retry_after_ms: int = 2_000) -> Optional[AlterPartitionRequest]:
        """The in-flight AlterPartition again, unchanged, once ``retry_after_ms`` passed without an answer.

        Dropping it instead would let the HW leave out a replica the controller may already have
        added (the answer, not the request, may be what was lost): the seed-2427 data loss.
        """
        if self.role != LEADER or self._proposal is None or self.pending_isr is None:
            return None
        if now_ms - self.pending_since_ms < retry_after_ms:
            return None
        self.pending_since_ms = now_ms
        return self._proposal

    def maybe_expand_isr(self, replica: int, now_ms: int, retry_after_ms: int = 2_000) -> Optional[AlterPartitionRequest]:
        if self.role != LEADER or replica in self.isr or replica not in self.replicas:
            return None
        if self._pending_blocks(now_ms, retry_after_ms):
            return None
        leo = self.remote[replica].log_end_offset
        if leo >= self.high_watermark and leo >= self.leader_epoch_start_offset:
            return self._propose(self.isr | {replica}, now_ms)
        return None

    def maybe_shrink_isr(self, now_ms: int, retry_after_ms: int = 2_000) -> Optional[AlterPartitionRequest]:
        """ISR expiration: propose removing followers not caught up within the lag time."""
        if self.role != LEADER or self._pending_blocks(now_ms, retry_after_ms):
            return None
        out = {r for r in self.isr if r != self.broker_id and not self.is_caught_up(r, now_ms)}
        if not out:
            return None
        proposal = self._propose(self.isr - out, now_ms)
        # While a shrink is pending the maximal ISR is the old ISR (Kafka's PendingShrinkIsr).
        self.pending_isr = set()
        return proposal

    def _count_isr_change(self, new_isr: Sequence[int]) -> None:
        """Count an ISR change this leader adopts (its own proposal or a controller's removal)."""
        if len(new_isr) < len(self.isr):
            self.isr_shrinks += 1
        elif len(new_isr) > len(self.isr):
            self.isr_expands += 1

    def on_alter_partition_response(self, resp: AlterPartitionResponse, now_ms: int) -> bool:
        """Adopt the controller's committed ISR; True if the ISR changed.

        Only the answer to the proposal in flight ends it (an answer to an older copy of another
        proposal does not). A refusal that shows the ISR this leader already has settles the
        proposal: what it would have added is not in the ISR.
        """
        st = resp.state
        prop = self._proposal
        mine = (prop is not None and resp.proposal == prop.new_isr
                and resp.request_partition_epoch == prop.partition_epoch)
        if mine:
            self.pending_isr = None
            self._proposal = None
        if st is None or self.role != LEADER or st.leader != self.broker_id or st.leader_epoch != self.leader_epoch:
            return False
        if st.partition_epoch <= self.partition_epoch:
            if mine and st.partition_epoch == self.partition_epoch:
                self.unconfirmed_additions = set()
            return False
        self._count_isr_change(st.isr)
        self.isr = set(st.isr)
        self.partition_epoch = st.partition_epoch
        # A newer committed ISR: any older proposal carries a stale partition epoch and can no
        # longer commit, so what it would have added is settled.
        self.unconfirmed_additions = set()
        self._proposal = None
        self.pending_isr = None
        for r in st.replicas:
            if r != self.broker_id and r not in self.remote:
                self.remote[r] = ReplicaState(0)
        self.maybe_increment_hw(now_ms)
        return True

    def maybe_increment_hw(self, now_ms: int) -> bool:
        """Advance the HW to the min LEO over the maximal ISR; True if it moved."""
        isr = self.isr
        if self.role != LEADER or len(isr) < min(self.min_insync_replicas, max(1, len(self.replicas))):
            return False
        new_hw = self.log.log_end_offset
        # The maximal ISR is the ISR itself unless a change is pending (no set built then).
        members = isr if self.pending_isr is None and not self.unconfirmed_additions else self.maximal_isr
        me, remote = self.broker_id, self.remote
        for r in members:
            if r == me:
                continue
            st = remote.get(r)
            leo = st.log_end_offset if st is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            if self.log.producer_state.unreplicated:
                self.log.last_stable_offset(new_hw)  # forget the transactions the HW passed (Kafka's onHighWatermarkUpdated)
            return True
        return False

    # --------------------------------------------------------- follower side
    def next_follower_request(self, correlation_id: int, max_wait_ms: int = 0,
                              incarnation: int = -1) -> Optional[object]:
        """The follower's next request to its leader: OffsetsForLeaderEpoch while truncating, else Fetch
        (carrying the broker's ``incarnation``, KIP-903)."""
        if self.role != FOLLOWER or self.leader < 0 or self.follower_state == FAILED:
            return None
        if self.follower_state == TRUNCATING:
            if self.log.epochs.latest_epoch == UNDEFINED_EPOCH:
                # Nothing stamped with an epoch: nothing to compare, fetch from the log end.
                if self.log.log_end_offset > 0:
                    self._truncate(self.high_watermark)
                self.follower_state = FETCHING
            else:
                return OffsetsForLeaderEpochRequest(
                    self.broker_id, self.topic, self.partition, self.leader_epoch,
                    self.log.epochs.latest_epoch, correlation_id,
                )
        return FetchRequest(
            self.broker_id, self.topic, self.partition, self.log.log_end_offset, self.leader_epoch,
            correlation_id, max_wait_ms=max_wait_ms, log_start_offset=self.log.log_start_offset,
            replica_incarnation=incarnation,
        )

    def on_offsets_for_leader_epoch(self, resp: OffsetsForLeaderEpochResponse) -> bool:
        """KIP-101/KIP-279 truncation; True when the follower may start fetching."""
        if self.role != FOLLOWER or self.follower_state != TRUNCATING or resp.error is not None:
            return False
        leo = self.log.log_end_offset
        if resp.leader_epoch == UNDEFINED_EPOCH or resp.end_offset == UNDEFINED_OFFSET:
            self._truncate(min(self.high_watermark, leo))  # Kafka's legacy fallback
            self.follower_state = FETCHING
            return True
        f_epoch, f_end = self.log.epochs.end_offset_for(resp.leader_epoch, leo)
        if f_epoch != resp.leader_epoch or f_end == UNDEFINED_OFFSET:
            # We do not know the leader's epoch: cut back to the end of our largest
            # epoch below it and ask again (KIP-279's iteration).
            target = min(f_end if f_end != UNDEFINED_OFFSET else 0, leo)
            self._truncate(target)
            if self.log.epochs.latest_epoch == UNDEFINED_EPOCH:
                self.follower_state = FETCHING
                return True
            return False
        self._truncate(min(f_end, resp.end_offset, leo))
        self.follower_state = FETCHING
        return True

    def on_fetch_response(self, req: FetchRequest, resp: FetchResponse, now_ms: int) -> int:
        """Append what the leader sent; returns the number of records appended.

        An append that fails on this replica (other than a batch not contiguous with the log or
        damaged in transit, which sends it back to truncation) raises nothing: the partition
        stops fetching (:meth:`fail_fetching`) and 0 is returned, though runs of a multi-run
        append before the failing one stay in the log.
        """
        if self.role != FOLLOWER or self.follower_state != FETCHING or resp.leader_epoch != self.leader_epoch:
            return 0
        if req.fetch_offset != self.log.log_end_offset:
            return 0  # truncated meanwhile; this response is stale
        if resp.error is OffsetOutOfRangeError:
            if resp.log_end_offset >= 0 and resp.log_end_offset < self.log.log_end_offset:
                self._truncate(resp.log_end_offset)  # only after an unclean election
            elif req.fetch_offset < resp.log_start_offset:
                self.log.truncate_fully_and_start_at(resp.log_start_offset)
                self.high_watermark = resp.log_start_offset
                self.truncations += 1
            return 0
        if resp.error is not None:
            return 0
        appended = 0
        if resp.records:
            try:
                # The log takes the batches' producer ids into its producer state as it writes them,
                # so a new leader deduplicates too.
                res = self.log.append_batches(resp.records, assign_offsets=False)
            except (InvalidOffsetError, CorruptRecordError) as exc:
                # Not contiguous with our log (or damaged in transit): find the divergence point again.
                if isinstance(exc, CorruptRecordError):
                    self.corrupt_fetches += 1
                    _logger.error(
                        "%s-%d: broker %d fetched invalid data from leader %d at offset %d: %s",
                        self.topic, self.partition, self.broker_id, self.leader, req.fetch_offset, exc)
                self.follower_state = TRUNCATING
                return 0
            except (PylogError, OSError) as exc:
                # A failing disk (KafkaStorageError) or a batch this replica refuses (RecordTooLargeError,
                # ...): stop fetching this partition, keeping what landed of a multi-run append.
                self.fail_fetching(req.fetch_offset, exc, "append")
                return 0
            appended = res.records_count
        new_hw = min(resp.high_watermark, self.log.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            if self.log.producer_state.unreplicated:
                self.log.last_stable_offset(new_hw)  # as the leader (maybe_increment_hw)
        # Kafka's follower follows the leader's log start offset (retention, deleteRecords,
        # consumer-aware retention), never past its own HW.
        new_start = min(resp.log_start_offset, self.high_watermark)
        if new_start > self.log.log_start_offset:
            self.log.delete_records_before(new_start)
        return appended

    def fail_fetching(self, offset: int, exc: BaseException, what: str = "append") -> None:
        """Stop fetching this partition after ``what`` failed at ``offset`` (Kafka's fetcher
        ``markPartitionFailed``): the error is logged, nothing is raised.

        The replica's bookkeeping matches what is in its log: a multi-run append that failed
        part-way keeps the runs that landed (a valid prefix of the leader's log), which the log's
        producer state took in as they landed; a truncation that failed part-way reloaded it (the
        log keeps its producer state equal to its records). The HW is at most the LEO. The follower sends nothing more for this partition, so its
        leader drops it from the ISR after ``replica_lag_time_max_ms``. A disk error
        (KafkaStorageError, OSError) is sticky until the broker restarts (Kafka takes the log
        directory offline); any other error is retried on the next leader or leader epoch.

        Complexity: O(1). Durability: none added.
        Thread-safety: none (the scheduler thread).
        """
        storage = isinstance(exc, OSError)
        self.follower_state = FAILED
        self.storage_failed = self.storage_failed or storage
        self.fetch_failure = f"{what} at offset {offset} failed: {type(exc).__name__}: {exc}"
        if self.high_watermark > self.log.log_end_offset:
            self.high_watermark = self.log.log_end_offset
        _logger.error(
            "%s-%d: broker %d stopped fetching from leader %d (epoch %d): %s at offset %d failed "
            "(log end offset now %d; %s): %s: %s", self.topic, self.partition, self.broker_id, self.leader,
            self.leader_epoch, what, offset, self.log.log_end_offset,
            "disk error: offline until the broker restarts" if self.storage_failed else "retried on a new leader epoch",
            type(exc).__name__, exc)

    def _truncate(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            self.log.truncate_to(offset)
            self.truncations += 1  # (the log reloads its producer state)
        if self.high_watermark > self.log.log_end_offset:
            self.high_watermark = self.log.log_end_offset

    # ---------------------------------------------------------------- checks
    def _check(self) -> None:
        """Assert this replica's invariants."""
        leo = self.log.log_end_offset
        assert 0 <= self.high_watermark <= leo, (self, leo)
        assert all(s <= leo for _, s in self.log.epochs.entries), (self, self.log.epochs.entries)
        if self.role == LEADER:
            assert self.leader == self.broker_id
            assert self.broker_id in self.isr, f"leader {self.broker_id} not in its ISR {self.isr}"
            assert self.isr <= set(self.replicas), (self.isr, self.replicas)
            assert self.log.epochs.latest_epoch <= self.leader_epoch
        if self.pending_isr is not None:
            assert self.pending_isr <= set(self.replicas)
        assert self.unconfirmed_additions <= set(self.replicas), (self.unconfirmed_additions, self.replicas)
        assert self.producer_state.map_end_offset == leo, (self, self.producer_state.map_end_offset)
        assert self.follower_state != FAILED or self.fetch_failure is not None, self
        self.producer_state._check()


def records_equal_below(a: Log, b: Log, end: int) -> Optional[int]:
    """First offset below ``end`` where the two logs differ (batch CRC, offsets, epoch), else None.

    Offsets below either log's start or either log's cleaner checkpoint are
    not compared: retention and compaction run on each replica on its own (as
    in Kafka), so those sections may legitimately differ batch by batch.
    """
    start = max(a.log_start_offset, b.log_start_offset, a.cleaner_checkpoint or 0, b.cleaner_checkpoint or 0)
    ia = _batch_index(a, end)
    ib = _batch_index(b, end)
    for off in sorted(set(ia) | set(ib)):
        if off >= end:
            break
        if off < start:
            continue
        if ia.get(off) != ib.get(off):
            return off
    return None


def _batch_index(log: Log, end: int) -> Dict[int, Tuple[int, int, int]]:
    out: Dict[int, Tuple[int, int, int]] = {}
    off = log.log_start_offset
    end = min(end, log.log_end_offset)
    while off < end:
        batches = log.read_batches(off, 1 << 20, max_offset=end)
        if not batches:
            break
        for b in batches:
            out[b.base_offset] = (b.last_offset, b.partition_leader_epoch, b.info.crc)
            off = b.last_offset + 1
    return out


__all__: List[str] = ["Partition", "ReplicaState", "records_equal_below", "LEADER", "FOLLOWER", "TRUNCATING", "FETCHING",
                       "FAILED"]
