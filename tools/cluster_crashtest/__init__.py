"""tools/cluster_crashtest: a randomized fault loop over a real three-node cluster and one
ZooKeeper, with acks=all writers and the acknowledged-writes oracle checked on every copy
(see __main__ for the command, docs/FAULT_TESTING.md "Cluster crash test").

    cluster_run.py  ClusterRun: the temp dir, ZooKeeper, the nodes and the writers; stop all
    fault_table.py  FAULTS: one function per fault kind (kill -9 of a node, of a shard, ...)
    fault_loop.py   FaultLoop: faults at seeded random intervals, heal waits, the final check
    run_report.py   RunReport: what happened, and the final report and verdict
"""
