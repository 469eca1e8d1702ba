"""The shard actor: owns the topics that hash to it, their seqs, index and WAL group."""
