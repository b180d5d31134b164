"""Prometheus metrics of ``sim-serve`` with vLLM's metric names (``prometheus_client``).

Each app owns a :class:`~prometheus_client.CollectorRegistry`, so several servers in one
process (tests) never share series. Gauges (``vllm:num_requests_running``,
``vllm:num_requests_waiting``) are read from the simulated server at scrape time; counters
and histograms are updated as requests finish. Names follow vLLM's ``/metrics`` where vLLM
has the metric; the simulator's own figures are prefixed ``agentlab_sim_``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from agentlab.llm.sim_backend import SimResult, SimServer

__all__ = ["ServeMetrics"]

# vLLM's buckets (seconds) for TTFT and end-to-end latency
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0)  # fmt: skip
_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


class _Live(Collector):
    """Gauges read from the simulated server when scraped."""

    def __init__(self, server: SimServer, model: str) -> None:
        self._server, self._model = server, model

    def collect(self) -> Iterator[Any]:
        m = self._server.metrics()
        for name, doc, key in (
            ("vllm:num_requests_running", "Number of requests in model execution.", "num_requests_running"),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "num_requests_waiting"),
            ("agentlab_sim_slots", "Decode slots of the simulated server (max_num_seqs).", "slots"),
        ):  # fmt: skip
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric([self._model], float(m[key]))
            yield g


class ServeMetrics:
    """The metrics of one sim-serve app (see the module docstring)."""

    def __init__(self, server: SimServer, model: str) -> None:
        self.model = model
        self.registry = CollectorRegistry(auto_describe=True)
        r, lbl = self.registry, ["model_name"]
        r.register(_Live(server, model))
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", lbl, registry=r
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", lbl, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*lbl, "finished_reason"],
            registry=r,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lbl,
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            lbl,
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            lbl,
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            lbl,
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.faults = Counter(
            "agentlab_sim_faults",
            "Simulated faults by kind (rate_limited, timeout, malformed) and client "
            "disconnects (cancelled).",
            [*lbl, "kind"],
            registry=r,
        )

    def finished(self, res: SimResult) -> None:
        """Count a request answered in full."""
        m = self.model
        self.prompt_tokens.labels(m).inc(res.prompt_tokens)
        self.generation_tokens.labels(m).inc(res.completion_tokens)
        finish = "tool_calls" if res.tool_calls else res.finish_reason
        self.success.labels(m, finish).inc()
        self.ttft.labels(m).observe(max(0.0, res.first_token - res.arrival))
        self.e2e.labels(m).observe(max(0.0, res.end - res.arrival))
        if res.queue_wait is not None:
            self.queue.labels(m).observe(res.queue_wait)
        if res.completion_tokens > 1:
            tpot = (res.end - res.first_token) / (res.completion_tokens - 1)
            self.tpot.labels(m).observe(max(0.0, tpot))

    def fault(self, kind: str) -> None:
        """Count a simulated fault or a client disconnect."""
        self.faults.labels(self.model, kind).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
