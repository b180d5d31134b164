"""Prometheus metrics of ``sim-serve`` with vLLM v1's names, labels and buckets.

Uses ``prometheus_client``. Each app owns a :class:`~prometheus_client.CollectorRegistry`,
so several servers in one process (tests) never share series. Every ``vllm:`` series
carries the labels ``model_name`` and ``engine`` (``"0"``: one engine core), as vLLM's
``PrometheusStatLogger`` does (``vllm/v1/metrics/loggers.py``):

- gauges read from the simulated server at scrape time: ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``; counters
  ``vllm:num_preemptions_total`` (the engine's, when it reports them);
- counters updated as requests finish: ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``, ``vllm:request_success_total{finished_reason}``
  (``stop`` / ``length`` / ``abort``: vLLM's engine reasons, never ``tool_calls``),
  ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (in tokens);
- histograms: ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``
  (one observation per token interval), ``vllm:request_time_per_output_token_seconds``,
  ``vllm:e2e_request_latency_seconds`` and the phase times
  ``vllm:request_{queue,prefill,decode,inference}_time_seconds``,
  ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``,
  ``vllm:request_prefill_kv_computed_tokens``, ``vllm:request_params_max_tokens``,
  ``vllm:request_max_num_generation_tokens``, ``vllm:request_params_n``.

The simulator's own figures are prefixed ``agentlab_sim_``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from agentlab.llm.sim_backend import SimResult, SimServer

__all__ = ["ServeMetrics", "build_1_2_5_buckets", "cached_tokens", "metrics_finish_reason"]

# vLLM v1's buckets (seconds), vllm/v1/metrics/loggers.py
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                  2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_N_BUCKETS = (1, 2, 5, 10, 20)
_LABELS = ["model_name", "engine"]
_ENGINE = "0"


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


def cached_tokens(res: SimResult) -> int:
    """Prompt tokens served from the engine's prefix cache (0 until the engine reports
    them: ``cached_tokens`` on the result or on its engine request)."""
    n = getattr(res, "cached_tokens", None)
    if n is None:
        n = getattr(res.req, "cached_tokens", 0) if res.req is not None else 0
    return int(n or 0)


def metrics_finish_reason(res: SimResult) -> str:
    """The engine's finish reason (vLLM's ``FinishReason``): ``stop`` or ``length``.

    A tool call is text the model stopped after (vLLM's chat layer relabels it
    ``tool_calls``; its engine and metrics never do)."""
    return "length" if res.finish_reason == "length" else "stop"


class _Live(Collector):
    """Gauges and engine counters read from the simulated server when scraped.

    The KV-cache, preemption and prefix-cache figures are the engine's where
    :meth:`SimServer.metrics` reports them (``kv_cache_usage_perc``,
    ``num_preemptions_total``, ``prefix_cache_{queries,hits}_total``); otherwise 0, and the
    prefix-cache counters sum the finished requests' prompt and ``cached_tokens``.
    """

    def __init__(self, server: SimServer, model: str, prefix: list[float]) -> None:
        self._server, self._model, self._prefix = server, model, prefix

    def collect(self) -> Iterator[Any]:
        m = self._server.metrics()
        labels = [self._model, _ENGINE]
        gauges = (
            ("vllm:num_requests_running", "Number of requests in model execution batches.",
             m["num_requests_running"]),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
             m["num_requests_waiting"]),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             m.get("kv_cache_usage_perc", 0.0)),
        )  # fmt: skip
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc, labels=_LABELS)
            g.add_metric(labels, float(value))
            yield g
        counters = (
            ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             m.get("num_preemptions_total", 0)),
            ("vllm:prefix_cache_queries",
             "Prefix cache queries, in terms of number of queried tokens.",
             m.get("prefix_cache_queries_total", self._prefix[0])),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
             m.get("prefix_cache_hits_total", self._prefix[1])),
        )  # fmt: skip
        for name, doc, value in counters:
            c = CounterMetricFamily(name, doc, labels=_LABELS)
            c.add_metric(labels, float(value))
            yield c
        slots = GaugeMetricFamily(
            "agentlab_sim_slots", "Decode slots of the simulated server (max_num_seqs).",
            labels=["model_name"],
        )  # fmt: skip
        slots.add_metric([self._model], float(m["slots"]))
        yield slots


class ServeMetrics:
    """The metrics of one sim-serve app (see the module docstring)."""

    def __init__(self, server: SimServer, model: str, *, max_model_len: int = 131_072) -> None:
        self.model = model
        self._server = server
        # no `*_created` series, as vLLM (a process-wide switch of prometheus_client)
        disable_created_metrics()
        self.registry = r = CollectorRegistry(auto_describe=True)
        self._prefix = [0.0, 0.0]  # queried, hit prompt tokens of finished requests
        r.register(_Live(server, model, self._prefix))

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*_LABELS, *extra], registry=r)

        def hist(name: str, doc: str, buckets: Any) -> Any:
            return Histogram(name, doc, _LABELS, buckets=buckets, registry=r).labels(model, _ENGINE)

        lbl = (model, _ENGINE)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(*lbl)  # fmt: skip
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.").labels(*lbl)  # fmt: skip
        self.success = counter(
            "vllm:request_success", "Count of successfully processed requests.",
            ("finished_reason",),
        )  # fmt: skip
        for reason in ("stop", "length", "abort"):  # every reason shows, as in vLLM
            self.success.labels(*lbl, reason)
        tokens = build_1_2_5_buckets(max_model_len)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_BUCKETS)  # fmt: skip
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _TOKEN_BUCKETS)  # fmt: skip
        self.tpot = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", _TOKEN_BUCKETS)  # fmt: skip
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _REQUEST_BUCKETS)  # fmt: skip
        self.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", _REQUEST_BUCKETS)  # fmt: skip
        self.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", _REQUEST_BUCKETS)  # fmt: skip
        self.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", _REQUEST_BUCKETS)  # fmt: skip
        self.inference = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", _REQUEST_BUCKETS)  # fmt: skip
        self.req_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)  # fmt: skip
        self.req_generation = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)  # fmt: skip
        self.req_computed = hist("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens)  # fmt: skip
        self.req_max_tokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens)  # fmt: skip
        self.req_max_gen = hist("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tokens)  # fmt: skip
        self.req_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", _N_BUCKETS)  # fmt: skip
        self.faults = Counter(
            "agentlab_sim_faults",
            "Simulated faults by kind (rate_limited, timeout, malformed) and client "
            "disconnects (cancelled).",
            ["model_name", "kind"],
            registry=r,
        )

    def finished(self, res: SimResult, max_tokens: int | None = None) -> None:
        """Count a request answered in full (``max_tokens``: what it asked for, if any)."""
        lbl = (self.model, _ENGINE)
        n, prompt = res.completion_tokens, res.prompt_tokens
        cached = min(cached_tokens(res), prompt)
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(n)
        self._prefix[0] += prompt
        self._prefix[1] += cached
        self.success.labels(*lbl, metrics_finish_reason(res)).inc()
        # phases as vLLM times them: queued at the engine (after the API server's
        # overhead), scheduled, first token, last token
        queued = res.arrival + self._server.profile.overhead_s
        scheduled = queued + (res.queue_wait or 0.0)
        first, end = res.first_token, res.end
        self.ttft.observe(max(0.0, first - res.arrival))
        self.e2e.observe(max(0.0, end - res.arrival))
        self.queue.observe(max(0.0, scheduled - queued))
        self.prefill.observe(max(0.0, first - scheduled))
        self.decode.observe(max(0.0, end - first))
        self.inference.observe(max(0.0, end - scheduled))
        if n > 1:
            tpot = max(0.0, (end - first) / (n - 1))
            self.tpot.observe(tpot)
            for _ in range(n - 1):  # vLLM observes every token interval
                self.itl.observe(tpot)
        self.req_prompt.observe(prompt)
        self.req_generation.observe(n)
        self.req_computed.observe(prompt - cached)
        self.req_n.observe(1)
        limit = max_tokens or self._server.profile.max_completion
        self.req_max_gen.observe(limit)
        if max_tokens:
            self.req_max_tokens.observe(max_tokens)

    def fault(self, kind: str) -> None:
        """Count a simulated fault or a client disconnect (``cancelled``: also vLLM's
        ``abort`` finish)."""
        self.faults.labels(self.model, kind).inc()
        if kind == "cancelled":
            self.success.labels(self.model, _ENGINE, "abort").inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
