"""Testing scaffolding shared by the test suite and the crash-test tool, kept out of the engine.

    fault_fs.py      FaultFs: the Fs seam with injectable faults (EIO, ENOSPC, short writes)
    crash_fs.py      CrashFs: a process that dies at a chosen call, then a power loss
    node_harness.py  Node: a real node run as a subprocess; wait_for, http_call, alive
    kill_table.py    ROLES: one SIGKILL-and-heal function per process kind of a node
    client_load.py   Load: a mixed client load with an oracle, for kill tests
    cluster_harness.py  cluster settings, replication views, LedgerWriter, the acked oracle
    zookeeper_server.py ZooKeeperServer: a real ZooKeeper on loopback or in a namespace
    net_lab.py       NetLab: network namespaces on one bridge; cuts, one-way drops, loss
    lazy_fs.py       LazyFsMount: a data dir on LazyFS, whose power loss drops unsynced data
    small_disk.py    SmallDisk: a small loop-mounted ext4 and a ballast that fills it
    disk_filler.py   DiskFiller: large appends that make a full disk show at once

The engine never imports from here; tests and tools/crashtest do. The failpoints stay in
the engine (topics_actors/storage/failpoint.py): their sites are engine code.
"""
