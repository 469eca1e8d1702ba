"""Testing scaffolding shared by the test suite and the crash-test tool, kept out of the engine.

    fault_fs.py      FaultFs: the Fs seam with injectable faults (EIO, ENOSPC, short writes)
    crash_fs.py      CrashFs: a process that dies at a chosen call, then a power loss
    node_harness.py  Node: a real node run as a subprocess; wait_for, http_call, alive
    kill_table.py    ROLES: one SIGKILL-and-heal function per process kind of a node
    client_load.py   Load: a mixed client load with an oracle, for kill tests

The engine never imports from here; tests and tools/crashtest do. The failpoints stay in
the engine (topics_actors/storage/failpoint.py): their sites are engine code.
"""
