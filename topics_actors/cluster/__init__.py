"""Cluster metadata: node membership, the controller, and each replicated topic's leader,
leader epoch and in-sync replicas, kept in ZooKeeper: the metadata layer of replication,
not yet wired into the node (docs/ARCHITECTURE.md).

Modules:
- `epoch_cache.py`: a replica's leader-epoch history
- `follower_fetch.py`: a follower's replication of one topic from its leader
- `isr_tracker.py`: the leader's view of one replicated topic
- `leader_election.py`: what the controller decides, as pure functions of the facts
- `metadata_store.py`: the cluster's metadata in ZooKeeper
- `reassignment.py`: moving a topic's replicas between nodes, and draining a node
- `replica_state.py`: the replication state of one topic, as the controller writes it
- `role_table.py`: what a node's supervisor tells its shards about replicated topics
- `znodes.py`: the few ZooKeeper operations the cluster metadata needs
- `zookeeper_znodes.py`: znodes over a real ZooKeeper session
"""
