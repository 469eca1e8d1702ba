"""A shard's queues (spec/api.md 8): leases of a queue topic's jobs.

- `queue_ops.py`: claim, ack, nack, extend and held (lease changes staged with an undo
  entry), and the claim pass of a coalesced claim.
- `claim_windows.py`: claim coalescing (a parked claim, answered by a local ClaimPass).
- `dead_letter_moves.py`: jobs moving to their dead-letter topic (on another shard: sent by
  the shell, finished by a local MoveDone).
- `dead_letter_sender.py` (shell): the moves' Appends to other shards, over ipc.
"""
