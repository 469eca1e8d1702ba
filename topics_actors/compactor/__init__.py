"""The compactor: checkpoints, the WAL's records absorbed into sealed per-topic segments and
a snapshot (docs/ARCHITECTURE.md section 1).

Modules:
- `checkpointer.py`: one checkpoint, start to finish, without sockets
- `compactor_server.py`: the compactor process's shell
- `segment_ledger.py`: the compactor's ledger
- `segment_cut.py`: a follower's cut applied to a topic's segments of a checkpoint pass
"""
