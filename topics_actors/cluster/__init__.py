"""Cluster metadata: node membership, the controller, and each replicated topic's leader,
leader epoch and in-sync replicas, kept in ZooKeeper: the metadata layer of replication,
not yet wired into the node (docs/ARCHITECTURE.md)."""
