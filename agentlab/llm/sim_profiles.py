"""Profiles of the simulated backend: ``sim/<profile>`` model strings.

A profile is a frozen bundle of server parameters (slots, prefill/decode rates, step token
budget, completion length distributions per stage, rate limits, fault rates). Any field can
be overridden through the client's defaults, e.g. ``LLMClient("sim/vllm-3b", slots=4)``.
Profiles save to and load from TOML (:meth:`SimProfile.save`, :func:`load_profile`); a
model string naming a ``.toml`` file loads it: ``LLMClient("sim/path/to/profile.toml")``.
Each profile's ``source`` says where its numbers come from.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentlab.errors import ConfigError, UnknownNameError
from agentlab.llm.tokens import check_tokenizer_name

__all__ = ["PROFILES", "SimProfile", "get_profile", "load_profile", "profile_field_names"]

#: (label, median tokens, sigma of log tokens) per stage label
Lengths = tuple[tuple[str, float, float], ...]


@dataclass(frozen=True, slots=True)
class SimProfile:
    """Parameters of one simulated LLM server.

    Rates of ``0`` mean "instant" (no time is spent on that phase); ``slots=0`` means
    unlimited concurrency (no queue). ``rpm``/``tpm`` of ``0`` disable rate limiting.
    """

    name: str
    # max_num_seqs: sequences batched per step; 0 = unlimited (a hosted API: every request
    # is served as if alone, no shared batch)
    slots: int = 0
    # max_num_batched_tokens: token budget of one step shared by decodes (1 token each) and
    # prefill chunks; 0 = unlimited (whole prompts prefilled in one step)
    max_num_batched_tokens: int = 0
    prefill_tps: float = 0.0  # prompt tokens per second of step time
    decode_tps: float = 0.0  # tokens per second for ONE sequence decoding alone
    decode_degrade: float = 0.0  # per extra sequence in a step: dt = (1 + d * (n - 1)) / tps
    decode_jitter: float = 0.0  # sigma of the per-request log-normal decode-speed factor
    overhead_s: float = 0.0  # fixed network + HTTP + tokenisation time before scheduling
    # Client-side CPU per request (building, serialising and sending it), spent serially by
    # the calling process before the request starts: litellm costs ~5-20 ms here. It is what
    # spaces out a fan-out of N "simultaneous" calls by a few milliseconds instead of 0.
    client_overhead_s: float = 0.0
    completion_median: float = 32.0  # log-normal completion length: median tokens
    completion_sigma: float = 0.5  # ... and sigma of log(tokens)
    # per-label lengths: labels["call"] or labels["stage"] -> (median, sigma); others use
    # the above
    lengths: Lengths = ()
    max_completion: int = 1024  # server-side cap (max_model_len): finish_reason "length"
    rpm: float = 0.0  # requests per minute before 429s; 0 = no limit
    tpm: float = 0.0  # tokens (prompt + completion) per minute before 429s; 0 = no limit
    burst_s: float = 2.0  # token buckets hold this many seconds of rpm/tpm
    rate_limit_s: float = 0.0  # time a 429 answer takes to arrive
    p_rate_limit: float = 0.0  # injected fault rates, per attempt
    p_timeout: float = 0.0
    p_malformed: float = 0.0
    hang_s: float = 1e9  # how long a "timeout" fault hangs (the client's timeout cuts it)
    tool_call_p: float = 0.5  # probability of a tool call when tools are offered
    bool_p: float = 0.5  # probability a boolean JSON field is true
    stream_chunks: int = 12  # a streamed completion arrives in about this many chunks
    # how prompts are counted (agentlab.llm.tokens): "llama3" (exact vocabulary + chat
    # template) or "chars:R" (R characters per token, 4 tokens of template per message)
    tokenizer: str = "chars:4"
    source: str = ""  # where the numbers come from (benchmark, calibration run)

    def length_of(self, stage: str | None, call: str | None = None) -> tuple[float, float]:
        """(median, sigma) of the completion length for a call's labels.

        ``call`` (e.g. the topology workflow's ``full_mesh_message``) is looked up first,
        then ``stage``; neither listed: ``completion_median`` / ``completion_sigma``.
        """
        for key in (call, stage):
            if key is None:
                continue
            for label, median, sigma in self.lengths:
                if label == key:
                    return median, sigma
        return self.completion_median, self.completion_sigma

    def to_dict(self) -> dict[str, Any]:
        """Plain data (TOML/JSON-able): ``lengths`` as ``{label: [median, sigma]}``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["lengths"] = {label: [m, s] for label, m, s in self.lengths}
        return d

    def save(self, path: str | Path) -> Path:
        """Write the profile as TOML (readable by :func:`load_profile`)."""
        path = Path(path)
        flat, lengths = [], []
        for k, v in self.to_dict().items():
            if k == "lengths":
                continue
            flat.append(f"{k} = {_toml_value(v)}")
        for label, (m, s) in self.to_dict()["lengths"].items():
            lengths.append(f"{_toml_value(label)} = [{_toml_value(m)}, {_toml_value(s)}]")
        text = "\n".join(flat) + "\n"
        if lengths:
            text += "\n[lengths]  # stage label = [median tokens, sigma of log tokens]\n"
            text += "\n".join(lengths) + "\n"
        path.write_text(text, encoding="utf-8")
        return path

    def capacity_rps(self, completion_tokens: float, prompt_tokens: float) -> float:
        """Requests/s the server sustains at full load for the given mean request size.

        Used by benchmarks to express throughput as a share of capacity.
        """
        caps: list[float] = []
        if self.slots > 0 and self.decode_tps > 0:
            rate = self.decode_tps / (1.0 + self.decode_degrade * (self.slots - 1))
            service = completion_tokens / rate + self.overhead_s
            if self.prefill_tps > 0:
                service += prompt_tokens / self.prefill_tps
            caps.append(self.slots / service)
        if self.rpm > 0:
            caps.append(self.rpm / 60.0)
        if self.tpm > 0:
            caps.append(self.tpm / 60.0 / max(1.0, completion_tokens + prompt_tokens))
        return min(caps) if caps else math.inf

    def mean_completion(self) -> float:
        """Mean of the (uncapped) log-normal completion length."""
        return self.completion_median * math.exp(self.completion_sigma**2 / 2)

    def replace(self, **changes: Any) -> SimProfile:
        """A copy with some fields changed (values are type-checked loosely)."""
        if not changes:
            return self
        fields = {f.name: f for f in dataclasses.fields(self)}
        clean: dict[str, Any] = {}
        for k, v in changes.items():
            f = fields.get(k)
            if f is None or k == "name":
                raise ConfigError(
                    f"unknown sim profile parameter {k!r}; valid: {', '.join(sorted(fields))}"
                )
            if k in ("source", "tokenizer"):
                clean[k] = str(v) if k == "source" else check_tokenizer_name(str(v))
                continue
            if k == "lengths":
                clean[k] = _lengths(v)
                continue
            try:
                clean[k] = int(v) if f.type == "int" else float(v)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"sim profile parameter {k}={v!r} is not a number") from exc
            if clean[k] < 0:
                raise ConfigError(f"sim profile parameter {k}={v!r} must be >= 0")
        return dataclasses.replace(self, **clean)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):  # numpy floats too (repr would say np.float64(...))
        return "inf" if math.isinf(v) else repr(float(v))
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def _lengths(v: Any) -> Lengths:
    items = v.items() if isinstance(v, dict) else ((x[0], x[1:]) for x in v)
    out = []
    for label, pair in items:
        try:
            m, s = (float(x) for x in pair)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"sim profile lengths[{label!r}]={pair!r}: expected [median, sigma]"
            ) from exc
        if m <= 0 or s < 0:
            raise ConfigError(
                f"sim profile lengths[{label!r}]={pair!r}: need median > 0, sigma >= 0"
            )
        out.append((str(label), m, s))
    return tuple(out)


def load_profile(path: str | Path, **overrides: Any) -> SimProfile:
    """Read a profile written by :meth:`SimProfile.save` (or by hand) from TOML.

    Raises:
        ConfigError: the file is missing, not TOML, or has unknown / bad parameters.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"sim profile file {str(path)!r} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"sim profile file {str(path)!r} is not valid TOML: {exc}") from exc
    name = str(data.pop("name", path.stem))
    return SimProfile(name=name).replace(**data).replace(**overrides)


#: Profiles shipped as TOML files next to this module (``agentlab/llm/profiles/``), each
#: parameter with a ``# source:`` comment. ``vllm-3b.toml`` is generated from the
#: agentraffic paper's published server figures by ``datasets/make_vllm_3b_profile.py``.
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"

PROFILES: dict[str, SimProfile] = {
    # No latency at all: measures the toolkit's own overhead and throughput.
    "instant": SimProfile(
        name="instant", tool_call_p=0.5, source="No server: zero time (toolkit overhead only)."
    ),
    # The agentraffic paper's server: Llama-3.2-3B-Instruct on vLLM, max_num_seqs 8
    # (numbers and their sources in profiles/vllm-3b.toml).
    "vllm-3b": load_profile(PROFILE_DIR / "vllm-3b.toml"),
    # SmolLM2-135M on llama-cpp-cffi, 1 CPU thread, one decoding slot, on a busy 2-core box:
    # a calibration run, not hand-set (see source).
    "smollm2-cpu": SimProfile(
        name="smollm2-cpu",
        slots=1,
        prefill_tps=43.6,
        decode_tps=13.55,
        decode_jitter=0.51,
        overhead_s=0.0,
        completion_median=120.0,
        completion_sigma=0.6,
        max_completion=2048,
        source=(
            "agentlab.calibrate on datasets/real_smollm2_llamacpp_trace.csv, concurrency-1 "
            "calls only (32; slots=1, by=[round, concurrency], client=client): SmolLM2-135M "
            "Q4_1 on llama-cpp-cffi 0.4.42 via scripts/real_server.py, 1 thread, on the shared "
            "2-core development box under load (Dec 2026). Predicts the trace's held-out "
            "concurrency 2 and 4 p50/p95 TTFT and latency within 12% "
            "(tests/real/test_real_trace.py). Lengths are not from the trace (its replies "
            "were cut at max_tokens=24): default log-normal 120, 0.6."
        ),
    ),
    # A hosted API: effectively unlimited concurrency but RPM/TPM quotas that answer 429.
    "cloud": SimProfile(
        name="cloud",
        prefill_tps=20000.0,
        decode_tps=80.0,
        overhead_s=0.3,
        client_overhead_s=0.006,
        completion_median=120.0,
        completion_sigma=0.6,
        max_completion=1024,
        rpm=1200.0,
        tpm=600_000.0,
        burst_s=2.0,
        rate_limit_s=0.05,
        source=(
            "Hand-set, illustrative hosted API: no benchmark behind the numbers; the quotas "
            "are of the size hosted providers publish for a low usage tier."
        ),
    ),
}


def profile_field_names() -> frozenset[str]:
    """Names of the overridable profile parameters."""
    return frozenset(f.name for f in dataclasses.fields(SimProfile) if f.name != "name")


def get_profile(name: str, **overrides: Any) -> SimProfile:
    """Look up ``name`` (without the ``sim/`` prefix) and apply parameter overrides.

    A ``name`` ending in ``.toml`` is a path to a profile file (:func:`load_profile`).

    Raises:
        UnknownNameError: ``name`` is not a registered profile.
        ConfigError: an override is unknown or not a non-negative number.
    """
    if name.endswith(".toml"):
        return load_profile(name, **overrides)
    base = PROFILES.get(name)
    if base is None:
        raise UnknownNameError("sim profile", f"sim/{name}", [f"sim/{p}" for p in PROFILES])
    return base.replace(**overrides)
