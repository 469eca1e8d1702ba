"""Storage: the Fs seam, WAL frames, WAL files and their layout on disk.

Modules:
- `batch_frame.py`: the body of an AppendBatch frame
- `failpoint.py`: named failpoints at persistence call sites
- `file_table.py`: read access to record frames by location
- `frame.py`: WAL frame codec, format v2, little-endian throughout
- `frame_body.py`: bodies of the control frames
- `frame_types.py`: WAL frame types and header flag bits
- `fs.py`: the Fs seam
- `segment.py`: segment files, format v1
- `segment_audit.py`: the recovery check of one segment
- `segment_batch.py`: a batch frame in a segment's .data
- `segment_layout.py`: the byte layout of segment files
- `segment_lock.py`: the segment lock
- `segment_run.py`: a run of sealed segment records decoded straight into scan columns
- `segment_sweep.py`: removing segment files no kept snapshot lists, in both tiers
- `segment_tier.py`: where a segment lives
- `snapshot.py`: snapshot files
- `wal_damage.py`: where a WAL file's log ends: a lost tail, or damage inside the log
- `wal_layout.py`: where WAL files live, and what happens when the shard count changes
- `wal_scan.py`: reading WAL files
- `wal_writer.py`: the writing end of one shard's WAL group
"""
