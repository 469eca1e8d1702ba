"""The supervisor: process table, restart policy, control endpoints and the `topics` CLI."""
