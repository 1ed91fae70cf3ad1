"""Controller: assignment, leader selectors, fencing, liveness, controlled shutdown, failover."""
from __future__ import annotations

import random

import pytest

from pylog.errors import FencedLeaderEpochError, InvalidConfigurationError, StaleControllerEpochError, TopicAlreadyExistsError
from pylog.replication.assignment import assign_replicas
from pylog.replication.controller import OFFLINE, ONLINE, Controller, MetadataStore, TopicConfig
from pylog.replication.messages import NO_LEADER, AlterPartitionRequest, BrokerHeartbeat, LeaderAndIsrRequest

SESSION = 1_000


def test_assignment_matches_kafka_table():
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, shift=0)
    assert got == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
                   [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_assignment_random_start_is_seeded_and_valid():
    a = assign_replicas([0, 1, 2], 7, 3, rng=random.Random(3))
    b = assign_replicas([0, 1, 2], 7, 3, rng=random.Random(3))
    assert a == b
    for replicas in a:
        assert sorted(replicas) == [0, 1, 2]
    with pytest.raises(InvalidConfigurationError, match="larger than the number of brokers"):
        assign_replicas([0, 1], 1, 3)


def setup(brokers=(0, 1, 2), now=0, unclean=False, rf=3, min_isr=2):
    store = MetadataStore(list(brokers), random.Random(1))
    assert store.try_claim(0, now, SESSION)
    c = Controller(0, store, session_timeout_ms=SESSION, now_ms=now)
    for b in brokers:
        c.handle(b, BrokerHeartbeat(b, 1), now)
    c.create_topic(TopicConfig("t", 1, rf, min_isr, unclean), start_index=0, shift=0)
    return store, c


def test_create_topic_leader_is_preferred_replica():
    store, c = setup()
    s = store.partitions[("t", 0)]
    assert (s.replicas, s.leader, s.isr, s.leader_epoch) == ((0, 1, 2), 0, (0, 1, 2), 0)
    assert store.state_of(("t", 0)) == ONLINE
    with pytest.raises(TopicAlreadyExistsError):
        c.create_topic(TopicConfig("t", 1, 3))


def test_session_expiry_elects_from_live_isr_in_assignment_order():
    store, c = setup()
    c.handle(1, BrokerHeartbeat(1, 1), 900)
    c.handle(2, BrokerHeartbeat(2, 1), 900)
    out = c.tick(1_001)  # broker 0's session expired (0 is the controller itself: never expires)
    s = store.partitions[("t", 0)]
    assert s.leader == 0  # the controller's own broker is not expired by its own tick
    c.last_heartbeat.pop(0)
    c._broker_failed(0, out)
    s = store.partitions[("t", 0)]
    assert (s.leader, s.isr, s.leader_epoch) == (1, (1, 2), 1)
    assert any(isinstance(m, LeaderAndIsrRequest) for _, m in out.items)


def test_no_live_isr_goes_offline_without_unclean():
    store, c = setup(min_isr=1)  # ISR (0,) meets min ISR 1: nobody becomes an eligible leader replica
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0,)), 0)  # ISR shrinks to the leader
    assert store.partitions[("t", 0)].isr == (0,)
    c.last_heartbeat.pop(0)
    from pylog.replication.messages import Outbox

    c._broker_failed(0, Outbox())
    s = store.partitions[("t", 0)]
    assert s.leader == NO_LEADER and s.isr == (0,) and store.state_of(("t", 0)) == OFFLINE
    assert store.unclean_elections == 0
    # The ISR member comes back: it is elected again.
    c.handle(0, BrokerHeartbeat(0, 2), 10)
    assert store.partitions[("t", 0)].leader == 0


def test_unclean_election_only_when_enabled():
    store, c = setup(unclean=True, min_isr=1)
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0,)), 0)
    c.last_heartbeat.pop(0)
    from pylog.replication.messages import Outbox

    c._broker_failed(0, Outbox())
    s = store.partitions[("t", 0)]
    assert s.leader == 1 and s.isr == (1,) and store.unclean_elections == 1


def test_preferred_and_controlled_shutdown_selectors():
    store, c = setup()
    s = store.partitions[("t", 0)]
    assert c.select_leader(s, "preferred", set()) == (0, (0, 1, 2))
    c.shutting_down.add(1)
    assert c.select_leader(s, "controlled_shutdown", {0}) == (2, (1, 2))
    # controlled shutdown of the leader moves leadership and answers "still leading 0"
    out = c.handle(0, BrokerHeartbeat(0, 1, want_shutdown=True), 5)
    s = store.partitions[("t", 0)]
    assert s.leader == 2 and 0 not in s.isr
    resp = [m for d, m in out.items if type(m).__name__ == "HeartbeatResponse"][0]
    assert resp.should_shut_down and resp.leads == 0


def test_alter_partition_fencing():
    store, c = setup()
    out = c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 7, (0, 1)), 0)
    resp = out.items[-1][1]
    assert resp.error is FencedLeaderEpochError and "partition epoch 7" in resp.message
    out = c.handle(1, AlterPartitionRequest(1, "t", 0, 0, 0, (0, 1)), 0)
    assert out.items[-1][1].error is FencedLeaderEpochError  # not the leader
    out = c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0, 1)), 0)
    resp = out.items[-1][1]
    assert resp.error is None and resp.state.isr == (0, 1) and resp.state.partition_epoch == 1


def test_restarted_broker_is_failed_over_and_fenced_by_incarnation():
    store, c = setup()
    out = c.handle(0, BrokerHeartbeat(0, 2), 10)  # broker 0 restarted (incarnation 1 -> 2)
    s = store.partitions[("t", 0)]
    assert s.leader == 1 and 0 not in s.isr
    sent = [m for d, m in out.items if d == 0 and isinstance(m, LeaderAndIsrRequest)]
    # State for the old incarnation (the failover) is addressed to it, so the new process ignores
    # it; the full state that follows registration is addressed to incarnation 2.
    assert [m.broker_incarnation for m in sent] == [1, 2]
    assert sent[-1].states[0].leader == 1


def test_controller_failover_and_stale_epoch_fencing():
    store, c = setup()
    assert not store.try_claim(1, 500, SESSION)
    assert store.try_claim(1, 1_001 + SESSION, SESSION)  # 0's lease expired
    assert store.controller_id == 1 and store.controller_epoch == 2
    new = Controller(1, store, session_timeout_ms=SESSION, now_ms=2_100, previous_controller=0)
    out = new.activate(2_100)
    s = store.partitions[("t", 0)]
    assert s.leader == 1 and 0 not in s.isr  # the old controller's broker is failed over at once
    assert all(m.controller_epoch == 2 for _, m in out.items)
    # The deposed controller's writes are refused, and it deactivates itself.
    with pytest.raises(StaleControllerEpochError):
        store.write(1, s)
    c.handle(0, AlterPartitionRequest(0, "t", 0, 1, s.partition_epoch, (0, 1)), 2_200)
    store._check()
    new._check()


def test_lease_cannot_be_renewed_by_a_restarted_incarnation():
    store = MetadataStore([0, 1], random.Random(0))
    assert store.try_claim(0, 0, SESSION, incarnation=1)
    assert not store.try_claim(0, 10, SESSION, incarnation=2)
    assert store.try_claim(0, 10 + SESSION + 1, SESSION, incarnation=2)
    assert store.controller_epoch == 2


def test_eligible_leader_replicas_kip966():
    """ISR shrinks below min ISR -> the removed members (which hold every committed record,
    since the HW froze) become eligible leaders; an unclean restart removes a broker from the ELR."""
    from pylog.replication.messages import Outbox

    store, c = setup(min_isr=2)
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0,)), 0)
    s = store.partitions[("t", 0)]
    assert s.isr == (0,) and s.elr == (1, 2)
    # The ISR member restarts after a crash (it may have lost data): an ELR member leads instead.
    c._broker_failed(0, Outbox(), unclean=True)
    s = store.partitions[("t", 0)]
    assert s.leader == 1 and s.isr == (1,) and s.elr == (2,) and store.unclean_elections == 0
    # 2 crashes and comes back: it leaves the ELR.
    c.handle(2, BrokerHeartbeat(2, 2, unclean_restart=True), 10)
    assert store.partitions[("t", 0)].elr == ()
    # The ISR back at min ISR clears the ELR.
    s = store.partitions[("t", 0)]
    c.handle(1, AlterPartitionRequest(1, "t", 0, s.leader_epoch, s.partition_epoch, (1, 2)), 20)
    s = store.partitions[("t", 0)]
    assert s.isr == (1, 2) and s.elr == ()
    store._check()


def test_heartbeat_session_expiry_by_tick():
    store, c = setup()
    for t in (400, 800):
        c.handle(0, BrokerHeartbeat(0, 1), t)
        c.handle(2, BrokerHeartbeat(2, 1), t)
    assert c.tick(1_000).items == []  # broker 1 last heard at 0: exactly at the timeout, still alive
    out = c.tick(1_001)
    s = store.partitions[("t", 0)]
    assert 1 not in c.live_brokers() and s.isr == (0, 2) and s.leader == 0
    assert {d for d, m in out.items if isinstance(m, LeaderAndIsrRequest)} == {0, 1, 2}
    c.handle(1, BrokerHeartbeat(1, 1), 1_100)  # back (same incarnation): gets the full state again
    assert 1 in c.live_brokers()


def test_partition_states_and_reassignment_selector():
    store, c = setup()
    assert store.state_of(("t", 9)) == "NonExistent"
    assert store.state_of(("t", 0)) == ONLINE
    c.reassign(("t", 0), [2, 1])
    s = store.partitions[("t", 0)]
    assert s.replicas == (2, 1) and s.leader == 2 and s.isr == (1, 2) and s.leader_epoch == 1
    with pytest.raises(InvalidConfigurationError, match="no live in-sync replica"):
        c.reassign(("t", 0), [0])


def test_alter_partition_refuses_a_replica_caught_up_in_an_earlier_incarnation():
    """KIP-903 (found by the soak, seed 9032): the leader answered a fetch parked before broker 2
    crashed and proposed adding 2; 2 had restarted meanwhile with its unflushed tail lost. The
    controller refuses the addition: the fetch came from incarnation 1, 2 is incarnation 2 now."""
    store, c = setup()
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0, 1)), 0)  # 2 dropped out: pep 1
    c.handle(2, BrokerHeartbeat(2, 2), 5)  # broker 2 restarted: incarnation 2
    out = c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 1, (0, 1, 2), added_incarnations=((2, 1),)), 10)
    resp = out.items[-1][1]
    assert resp.error is FencedLeaderEpochError and "incarnation 1" in resp.message
    assert resp.proposal == (0, 1, 2) and resp.request_partition_epoch == 1
    assert store.partitions[("t", 0)].isr == (0, 1)
    # A fetch from the current incarnation makes it eligible.
    out = c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 1, (0, 1, 2), added_incarnations=((2, 2),)), 20)
    assert out.items[-1][1].error is None and store.partitions[("t", 0)].isr == (0, 1, 2)


def test_uncleanly_restarted_last_isr_member_gives_way_to_a_dead_elr_member_kip966():
    """The ISR is down to one member, the ELR holds the replicas that left it (HW frozen). The last
    member crashes (loses its unflushed tail) and restarts while no ELR member is live: it must not
    be re-elected (its followers would truncate committed records to it); the ELR becomes the
    offline partition's ISR and its member is elected when it comes back (issue 14, seed 702007)."""
    store, c = setup(min_isr=2)
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0,)), 0)
    assert store.partitions[("t", 0)].elr == (1, 2)
    for b in (1, 2):  # the ELR members' sessions end (cut off or down)
        c.last_heartbeat.pop(b)
    c.handle(0, BrokerHeartbeat(0, 2, unclean_restart=True), 10)  # 0 restarts after a crash
    s = store.partitions[("t", 0)]
    assert s.leader == NO_LEADER and 0 not in s.isr and s.isr == (1, 2) and s.elr == ()
    store._check()
    c.handle(2, BrokerHeartbeat(2, 1), 20)  # an ELR member is back: it leads
    s = store.partitions[("t", 0)]
    assert s.leader == 2 and 0 not in s.isr


def test_a_clean_restart_of_the_last_isr_member_is_still_elected():
    """Only an unclean restart loses data: a cleanly stopped last ISR member leads again."""
    store, c = setup(min_isr=2)
    c.handle(0, AlterPartitionRequest(0, "t", 0, 0, 0, (0,)), 0)
    for b in (1, 2):
        c.last_heartbeat.pop(b)
    c.handle(0, BrokerHeartbeat(0, 2, unclean_restart=False), 10)
    assert store.partitions[("t", 0)].leader == 0


def test_a_new_controller_elects_leaders_of_offline_partitions():
    """Kafka's onControllerFailover: partitions left offline (their ISR members all alive under the new
    controller's fresh sessions) get a leader at once, not at the next broker restart."""
    store, c = setup(min_isr=1)
    for b in (0, 1, 2):
        c.last_heartbeat.pop(b, None)
    from pylog.replication.messages import Outbox

    c._broker_failed(0, Outbox())  # the leader fails while no other ISR member is live: offline
    assert store.partitions[("t", 0)].leader == NO_LEADER and store.partitions[("t", 0)].isr == (0, 1, 2)
    store.resign(0)
    assert store.try_claim(1, 5_000, SESSION)
    c2 = Controller(1, store, session_timeout_ms=SESSION, now_ms=5_000, previous_controller=0)
    out = c2.activate(5_000)
    s = store.partitions[("t", 0)]
    assert s.leader == 1 and s.leader in s.isr
    assert any(isinstance(m, LeaderAndIsrRequest) and m.states[0].leader == s.leader for _, m in out.items
               if m.states)


def test_offsets_topic_replication_defaults_and_refusal():
    from pylog.replication.controller import offsets_topic_replication
    from pylog.replication.offsets_topic import OFFSETS_TOPIC

    assert [offsets_topic_replication(n) for n in (1, 2, 3, 5)] == [(1, 1), (2, 1), (3, 2), (3, 2)]
    store, c = setup(brokers=(0, 1, 2, 3, 4))
    with pytest.raises(InvalidConfigurationError, match="min_insync_replicas >= 2"):
        c.create_topic(TopicConfig(OFFSETS_TOPIC, 1, 3, 1))
    with pytest.raises(InvalidConfigurationError, match="replication_factor >= 3"):
        c.create_topic(TopicConfig(OFFSETS_TOPIC, 1, 2, 2))
    assert OFFSETS_TOPIC not in store.topics
    c.create_topic(TopicConfig(OFFSETS_TOPIC, 1, 3, 2))
    assert store.partitions[(OFFSETS_TOPIC, 0)].min_insync_replicas == 2
