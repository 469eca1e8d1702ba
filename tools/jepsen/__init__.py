"""tools/jepsen: partitions, power loss, full disks and the rest, struck at random against
three nodes and a ZooKeeper in network namespaces, with an oracle over every copy (see
__main__ for the command, docs/FAULT_TESTING.md "Jepsen-grade faults").

    lab_cluster.py  LabCluster: namespaces, LazyFS and small-disk data dirs, nodes, clients
    nemesis.py      FAULTS: one function per fault kind (partition, power_loss, ...)
    observers.py    Reader: what readers were shown, to check nothing seen later vanishes
    oracle.py       check_topic: the acked-writes, order, copies and reads checks
    jepsen_loop.py  JepsenLoop: the fault loop over the cluster; the run's last line
"""
