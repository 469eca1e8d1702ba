"""The reclaimer: periodic retention passes, the segment sweep, the cold tier.

Modules:
- `reclaimer_server.py`: the reclaimer process
- `segment_upkeep.py`: the reclaimer's care of segment files
"""
