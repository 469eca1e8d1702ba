"""Hard limits of the /v0 contract (spec/api.md 5.5, 5.6) and engine bounds."""

BATCH_RECORDS_MAX = 10_000
RECORD_BYTES_MAX = 1_048_576          # data + meta, compact JSON
META_BYTES_MAX = 16_384
META_KEYS_MAX = 64
TAG_BYTES_MAX = 256
NODE_BYTES_MAX = 128
IDEMPOTENCY_KEY_BYTES_MAX = 256

DIFF_LIMIT_DEFAULT = 256
DIFF_LIMIT_MAX = 1_000
DIFF_BATCH_BYTES_DEFAULT = 1_048_576
DIFF_BATCH_BYTES_MAX = 8_388_608

SCAN_LIMIT_DEFAULT = 10_000
SCAN_LIMIT_MAX = 50_000

DIFF_WAIT_MS_MAX = 30_000
DIFF_SETTLE_WAIT_MS = 2_000        # a diff waits this long for the routers it names
DIFF_SETTLE_ROUTERS_MAX = 64       # routers a diff may name (a destination has few)
LONG_POLLS_MAX = 10_000               # parked diff reads per shard

LIST_PAGE_SIZE_DEFAULT = 100
LIST_PAGE_SIZE_MAX = 1_000
LIST_LIMIT_MAX = 1_001                # names one list request takes from a shard, at most

# The shard's inbox: one commit batch holds at most this much staged work; write requests
# beyond it are answered `throttled` (retryable) instead of queueing without bound.
INBOX_REQUESTS_MAX = 4_096
INBOX_BYTES_MAX = 64 * 1024 * 1024

# Largest message a shard accepts from a peer (a maximal HTTP body plus framing).
MESSAGE_BYTES_MAX = 80 * 1024 * 1024


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))

# Queues (spec/api.md 8).
CLAIM_MAX = 1_000                     # jobs per claim
QUEUE_SEQS_MAX = 1_000                # seqs per ack, nack or extend
NACK_DELAY_MS_MAX = 86_400_000
# The longest a claim may wait in the shard before its answer: a coalescing window
# (claim_jitter_ms, at most 5000) plus the grace of its pass. Callers add it to their
# request timeout, or a coalesced claim would be sent again (leasing more jobs).
CLAIM_WAIT_MS_MAX = 6_000
