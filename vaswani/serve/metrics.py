"""What `GET /metrics` shows, in the Prometheus text format (prometheus_client, one registry per server).

vaswani_requests_total{endpoint, status}        requests answered, by endpoint and HTTP status
vaswani_request_seconds{endpoint}               latency of the answered requests (histogram)
vaswani_request_bytes{endpoint}                 request body sizes (histogram)
vaswani_batch_sentences                         sentences per decoded batch (histogram: the dynamic batching)
vaswani_batch_tokens                            source tokens per decoded batch (histogram)
vaswani_batch_seconds                           decoding time per batch (histogram)
vaswani_sentences_total{pair}                   sentences translated, by language pair
vaswani_queued_sentences                        sentences waiting for a batch now
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST  # of the /metrics answer

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BYTES_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)


class ServerMetrics:
    """The counters and histograms of one server, in a registry of its own."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("vaswani_requests", "Requests answered", ["endpoint", "status"],
                                registry=self.registry)  # fmt: skip
        self.latency = Histogram("vaswani_request_seconds", "Request latency in seconds", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.body_bytes = Histogram("vaswani_request_bytes", "Request body size in bytes", ["endpoint"],
                                    buckets=BYTES_BUCKETS, registry=self.registry)  # fmt: skip
        self.batch_sentences = Histogram("vaswani_batch_sentences", "Sentences per decoded batch",
                                         buckets=SIZE_BUCKETS, registry=self.registry)  # fmt: skip
        self.batch_tokens = Histogram("vaswani_batch_tokens", "Source tokens per decoded batch",
                                      buckets=tuple(16 * size for size in SIZE_BUCKETS), registry=self.registry)  # fmt: skip
        self.batch_seconds = Histogram("vaswani_batch_seconds", "Decoding time per batch in seconds",
                                       buckets=LATENCY_BUCKETS, registry=self.registry)  # fmt: skip
        self.sentences = Counter("vaswani_sentences", "Sentences translated", ["pair"], registry=self.registry)
        self.queued = Gauge("vaswani_queued_sentences", "Sentences waiting for a batch", registry=self.registry)

    def observe_request(self, endpoint: str, status: int, seconds: float, body_bytes: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        self.body_bytes.labels(endpoint).observe(body_bytes)

    def observe_batch(self, sentences: int, tokens: int, seconds: float) -> None:
        self.batch_sentences.observe(sentences)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)

    def text(self) -> bytes:
        return generate_latest(self.registry)
