"""Storage: the Fs seam, WAL frames, WAL files and their layout on disk."""
