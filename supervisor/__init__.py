"""The supervisor: process table, restart policy, control endpoints and the `topics` CLI.

cli              the `topics` command: serve, fsck, and the verbs over the HTTP API
node             the Supervisor: start, the loop (control, restarts, roles), the ordered stop
node_sockets     what it listens on: HTTP, control, events, the ZeroMQ front (and CURVE)
data_lock        the advisory lock that keeps a second server off a data dir
process_table    the children: how each is started, its state, its fate
restart_policy   when to restart a dead child, and when to give up on it
fork_server      children forked from a process that already imported their modules
front_core       the front's answers and forwarding, without sockets
forward_table    the front's forwarded requests in flight, bounded, each with a deadline
front_relay      the front's socket shell: a thread moving bytes for front_core
cluster_member   the node's ZooKeeper session and controller duties, in a thread
move_request     an operator's move or drain, checked and stored as topics' targets
service_notify   systemd's readiness protocol (sd_notify) without libsystemd
"""
