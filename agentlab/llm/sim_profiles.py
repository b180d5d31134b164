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
from agentlab.llm.sim_lengths import SLOPE_FIELDS, LengthDist, Lengths, length_keys
from agentlab.llm.tokens import check_tokenizer_name

__all__ = [
    "PROFILES",
    "SimProfile",
    "get_profile",
    "load_profile",
    "profile_field_names",
]


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
    client_overhead_sigma: float = 0.5  # sigma of each request's mean-1 log-normal share of it
    completion_median: float = 32.0  # log-normal completion length: median tokens
    completion_sigma: float = 0.5  # ... and sigma of log(tokens)
    # per-label lengths: labels["call"] or labels["stage"] (qualified by @topology and
    # #round, see length_keys) -> LengthDist; calls without a listed label use the above
    lengths: Lengths = ()
    # Within-group dependence of reply lengths: call label -> rho in [0, 1). Calls whose
    # labels carry the same ``length_corr_by`` value (a run) draw their length score as
    # sqrt(rho) * (the group's normal score) + sqrt(1 - rho) * (their own): each call's law
    # (``lengths``) is unchanged, but a group's replies run long or short together. Empty:
    # independent draws (the model before).
    length_corr: tuple[tuple[str, float], ...] = ()
    length_corr_by: str = "run_id"
    max_completion: int = 1024  # server-side cap (max_model_len): finish_reason "length"
    # A serving front end that cuts long prompts (the agentraffic paper's llm/serve_llm.py):
    # a prompt over truncate_to_len - max_tokens - truncate_margin tokens (max_tokens: the
    # request's, else max_completion) keeps that many, its head; 0 = no cut (vLLM itself
    # answers such a prompt with HTTP 400)
    truncate_to_len: int = 0
    truncate_margin: int = 0
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
    # characters per token of simulated free-text replies: log-normal median and sigma per
    # reply (agentlab.llm.sim_content.gen_reply); 0 = the common short words (~4.4 per
    # Llama-3 token), no draw. Decides how many tokens a history cut by characters holds.
    text_cpt_median: float = 0.0
    text_cpt_sigma: float = 0.0
    # --- engine mechanisms (vLLM v1); TOML section [engine]; each off-setting gives the
    # engine as it was before the mechanism existed
    # automatic prefix caching: a request skips the prompt blocks found cached (false: off)
    prefix_caching: bool = False
    block_size: int = 16  # tokens per KV block (vLLM's default on GPUs)
    kv_blocks: int = 0  # KV cache capacity in blocks; 0 = unlimited (no preemption)
    # step time added per cached token attended by each decoding sequence (0: no attention)
    attention_decode_s: float = 0.0
    # step time added per (prefill token x context token) pair of prefill chunks (0: none)
    attention_prefill_s: float = 0.0
    # step time = max(weight-read base, tokens / prefill_tps) instead of their sum (a
    # roofline: small prefills ride on the weight read; false: the sum, the model before)
    step_roofline: bool = False
    source: str = ""  # where the numbers come from (benchmark, calibration run)

    def __post_init__(self) -> None:
        # lengths given directly as (label, median, sigma) triples or a dict: normalised
        if not all(len(x) == 2 and isinstance(x[1], LengthDist) for x in self.lengths):
            object.__setattr__(self, "lengths", _lengths(self.lengths, self.max_completion))
        # (label, rho) pairs or a dict, each rho checked; the grouping label named (here, so
        # a profile built directly, replaced or loaded is checked alike)
        object.__setattr__(self, "length_corr", _length_corr(self.length_corr))
        if not isinstance(self.length_corr_by, str) or not self.length_corr_by:
            raise ConfigError("sim profile parameter length_corr_by must name a label")

    def length_dist(self, labels: dict[str, Any] | None) -> LengthDist:
        """The completion-length distribution of a call with these labels.

        The keys of :func:`length_keys` are looked up in order (``call`` before ``stage``,
        the most specific qualifier first; the first entry of a repeated label counts);
        none listed: the log-normal ``completion_median`` / ``completion_sigma``.
        """
        if self.lengths:
            table: dict[str, LengthDist] = {}
            for label, dist in self.lengths:
                table.setdefault(label, dist)
            for key in length_keys(labels):
                hit = table.get(key)
                if hit is not None:
                    return hit
        return LengthDist.lognormal(self.completion_median, self.completion_sigma)

    def length_rho(self, labels: dict[str, Any] | None) -> float:
        """The ``length_corr`` of a call, looked up as :meth:`length_dist` looks up its law
        (the keys of :func:`length_keys`, most specific first: ``execution@star`` before
        ``execution``); none listed: 0, an independent draw."""
        if self.length_corr:
            table = dict(self.length_corr)
            for key in length_keys(labels):
                hit = table.get(key)
                if hit is not None:
                    return hit
        return 0.0

    def length_of(self, stage: str | None, call: str | None = None) -> tuple[float, float]:
        """(median, sigma of the quartile body) of the completion length for a call's
        ``call`` / ``stage`` labels (unqualified; :meth:`length_dist` for the whole law)."""
        d = self.length_dist({"call": call, "stage": stage})
        return d.median, (d.sigma_lo + d.sigma_hi) / 2

    def to_dict(self) -> dict[str, Any]:
        """Plain data (TOML/JSON-able): ``lengths`` as ``{label: [median, sigma]}`` or
        ``{label: {p25, median, p75, mean}}``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        lengths: dict[str, Any] = {}
        for label, dist in self.lengths:
            lengths.setdefault(label, dist.to_toml(self.max_completion))
        d["lengths"] = lengths
        d["length_corr"] = dict(self.length_corr)
        return d

    def save(self, path: str | Path) -> Path:
        """Write the profile as TOML (readable by :func:`load_profile`), making its folder
        if need be."""
        path = Path(path)
        flat, lengths = [], []
        engine = []
        for k, v in self.to_dict().items():
            if k in ("lengths", "length_corr"):
                continue
            if k in ENGINE_KEYS:
                engine.append(f"{k} = {_toml_value(v)}")
                continue
            flat.append(f"{k} = {_toml_value(v)}")
        for label, v in self.to_dict()["lengths"].items():
            lengths.append(f"{_toml_value(label)} = {_toml_length(v)}")
        text = "\n".join(flat) + "\n"
        if lengths:
            text += "\n[lengths]  # label = [median, sigma of log tokens] or {p25, median, p75, p95, mean}\n"
            text += "\n".join(lengths) + "\n"
        if self.length_corr:
            text += "\n[length_corr]  # call label = rho of its lengths in a length_corr_by group\n"
            text += "".join(f"{_toml_value(k)} = {_toml_value(v)}\n" for k, v in self.length_corr)
        text += "\n[engine]  # vLLM v1 mechanisms (agentlab/llm/sim_engine.py)\n"
        text += "\n".join(engine) + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
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
            if k in ("length_corr", "length_corr_by"):  # checked by __post_init__
                clean[k] = v if k == "length_corr" else str(v)
                continue
            if k in ("source", "tokenizer"):
                clean[k] = str(v) if k == "source" else check_tokenizer_name(str(v))
                continue
            if k == "lengths":  # means are of lengths cut at the server's output limit
                cap = changes.get("max_completion", self.max_completion)
                clean[k] = _lengths(v, float(cap))
                continue
            if f.type == "bool":
                if not isinstance(v, bool) and str(v).lower() not in ("0", "1", "true", "false"):
                    raise ConfigError(f"sim profile parameter {k}={v!r} is not a boolean")
                clean[k] = v if isinstance(v, bool) else str(v).lower() in ("1", "true")
                continue
            try:
                clean[k] = int(v) if f.type == "int" else float(v)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"sim profile parameter {k}={v!r} is not a number") from exc
            if clean[k] < 0:
                raise ConfigError(f"sim profile parameter {k}={v!r} must be >= 0")
            if k == "block_size" and clean[k] < 1:
                raise ConfigError(f"sim profile parameter block_size={v!r} must be >= 1")
        return dataclasses.replace(self, **clean)


#: parameters of the engine's vLLM mechanisms (written in a profile's ``[engine]`` section)
ENGINE_KEYS = frozenset(
    {
        "prefix_caching",
        "block_size",
        "kv_blocks",
        "attention_decode_s",
        "attention_prefill_s",
        "step_roofline",
    }
)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):  # numpy floats too (repr would say np.float64(...))
        return "inf" if math.isinf(v) else repr(float(v))
    s = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def _toml_length(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return f"[{_toml_value(v[0])}, {_toml_value(v[1])}]"


def _length(label: str, v: Any, cap: float) -> LengthDist:
    if isinstance(v, LengthDist):
        return v
    if isinstance(v, dict) and "cap_share" in v:
        share = float(v["cap_share"])
        if not 0.0 <= share < 0.5:
            raise ConfigError(f"sim profile lengths[{label!r}]={v!r}: need 0 <= cap_share < 0.5")
        rest = {k: x for k, x in v.items() if k != "cap_share"}
        return _length(label, rest, cap).with_cap_share(share)
    try:
        if isinstance(v, dict) and set(v) == {"median", *SLOPE_FIELDS}:
            law = LengthDist(float(v["median"]), *(float(v[k]) for k in SLOPE_FIELDS))
            if (
                law.median <= 0
                or min(law.sigma_lo, law.sigma_hi, law.sigma_tail, law.sigma_far) < 0
            ):
                raise ConfigError(
                    f"sim profile lengths[{label!r}]={v!r}: need median > 0, sigmas >= 0"
                )
            return law
        if isinstance(v, dict):
            extra = set(v) - {"p25", "median", "p75", "p95", "mean"}
            if extra or not {"p25", "median", "p75"} <= set(v):
                raise ConfigError(
                    f"sim profile lengths[{label!r}]={v!r}: expected keys p25, median, p75"
                    " and optionally p95, mean"
                )
            mean, p95 = v.get("mean"), v.get("p95")
            return LengthDist.from_quantiles(
                float(v["p25"]), float(v["median"]), float(v["p75"]),
                None if mean is None else float(mean), None if p95 is None else float(p95),
                cap,
            )  # fmt: skip
        m, s = (float(x) for x in v)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"sim profile lengths[{label!r}]={v!r}: expected [median, sigma],"
            " {p25, median, p75, p95, mean} or {median, sigma_lo, sigma_hi, sigma_tail, sigma_far}"
        ) from exc
    if m <= 0 or s < 0:
        raise ConfigError(f"sim profile lengths[{label!r}]={v!r}: need median > 0, sigma >= 0")
    return LengthDist.lognormal(m, s)


def _lengths(v: Any, cap: float = math.inf) -> Lengths:
    if isinstance(v, dict):
        items = list(v.items())
    else:  # (label, LengthDist) pairs or (label, median, sigma) triples
        items = [(x[0], x[1] if len(x) == 2 else x[1:]) for x in v]
    return tuple((str(label), _length(str(label), pair, cap)) for label, pair in items)


def _length_corr(v: Any) -> tuple[tuple[str, float], ...]:
    items = list(v.items()) if isinstance(v, dict) else list(v)
    out = []
    for item in items:
        try:
            label, rho = item
            rho = float(rho)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"sim profile length_corr entry {item!r}: expected label = rho"
            ) from exc
        if not 0.0 <= rho < 1.0:
            raise ConfigError(f"sim profile length_corr[{label!r}]={rho!r}: need 0 <= rho < 1")
        out.append((str(label), rho))
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
    engine = data.pop("engine", {})
    if not isinstance(engine, dict) or set(engine) - ENGINE_KEYS:
        bad = sorted(set(engine) - ENGINE_KEYS) if isinstance(engine, dict) else engine
        raise ConfigError(
            f"sim profile file {str(path)!r}: unknown [engine] parameter(s) {bad!r}; "
            f"valid: {', '.join(sorted(ENGINE_KEYS))}"
        )
    data.update(engine)
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
