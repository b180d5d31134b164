"""The simulated LLM server behind ``sim/<profile>`` models.

Timing (all times from the client's :class:`~agentlab.core.clock.Clock`):

- with ``slots > 0`` a request is served by a vLLM-like engine
  (:mod:`agentlab.llm.sim_engine`): continuous batching of up to ``slots`` sequences,
  chunked prefill sharing each step's ``max_num_batched_tokens`` budget with the running
  decodes, FCFS admission, per-request decode-speed variation, client-deadline aborts;
- with ``slots == 0`` (a hosted API) every request is served as if alone:
  ``first = sent + overhead_s + 1 / decode_tps + prompt / prefill_tps`` and
  ``end = first + (n - 1) / (decode_tps * speed)``.

Completion lengths are drawn per request from the profile's length law for the call's
``labels["call"]`` or ``labels["stage"]``, qualified by ``@topology`` / ``#round``
(``SimProfile.length_dist``: quartiles and mean kept; else the log-normal
``completion_median``/``_sigma``), for free
text, structured output (free-text fields are lengthened) alike; ``max_tokens`` or the
profile's ``max_completion`` truncate with ``finish_reason="length"``.

A caller plans an attempt (:meth:`SimServer.plan`: content, faults, a first prediction),
then :meth:`SimServer.wait` or :meth:`SimServer.chunks` sleep on the clock until the
predicted times, advancing the engine and re-predicting when later arrivals delayed them.
Rate limits are token buckets (``rpm``, ``tpm``) refilled continuously, holding
``burst_s`` seconds of quota. One server exists per client config, per clock, per process:
Ray workers each get their own (use ``agentlab sim-serve`` for one shared server).
:meth:`SimServer.export_state` / :meth:`SimServer.restore_state` carry everything that
affects future calls (engine queues, buckets, counters, draw counters).

This module plans attempts; the rest of the server is split by responsibility:
:mod:`agentlab.llm.sim_result` (``SimResult``, the per-request draws, ``sim_*`` overrides),
:mod:`agentlab.llm.sim_running` (waiting, streaming, cancelling a planned attempt) and
:mod:`agentlab.llm.sim_state` (metrics, ``export_state`` / ``restore_state``).
"""

from __future__ import annotations

import hashlib
import math
import zlib
from typing import Any

from agentlab.core.clock import Clock
from agentlab.llm.sim_content import (
    Rng,
    append_marker,
    cut_at_stop,
    gen_json,
    gen_reply,
    gen_tool_call,
)
from agentlab.llm.sim_engine import Engine, EngineRequest
from agentlab.llm.sim_lengths import LengthDist
from agentlab.llm.sim_profiles import SimProfile
from agentlab.llm.sim_result import (
    SIM_OVERRIDES,
    SimResult,
    _block_hashes,
    _fault_u,
    _lognormal_factor,
    check_sim_overrides,
)
from agentlab.llm.sim_running import AttemptRunner
from agentlab.llm.sim_slots import prefix_digest
from agentlab.llm.sim_state import ServerState
from agentlab.llm.sim_tools import INVALID_ARGS_P, asks_for_program, play_along_reply
from agentlab.llm.structured import OutputSpec
from agentlab.llm.tokens import CharsTokenizer, Tokenizer, dumps_acyclic, get_tokenizer

# SimResult, SIM_OVERRIDES, check_sim_overrides (sim_result), _lognormal_factor: importable
# from here as before the split
__all__ = ["SIM_OVERRIDES", "SimResult", "SimServer", "check_sim_overrides"]


class _Knobs:
    """What :meth:`SimServer.plan_instant` needs of a call's parameters, converted once."""

    __slots__ = ("cap", "marker", "marker_p", "n_fixed")

    def __init__(self, cap: int, n_fixed: int | None, marker: str | None, marker_p: float) -> None:
        self.cap, self.n_fixed, self.marker, self.marker_p = cap, n_fixed, marker, marker_p


class SimServer(AttemptRunner, ServerState):
    """State of one simulated server (engine, buckets, totals). See the module docstring."""

    def __init__(self, profile: SimProfile, seed: int, clock: Clock) -> None:
        self.profile = profile
        self.seed = seed
        self.clock = clock
        self.engine = Engine(profile)
        self._active: list[tuple[float, float, int]] = []  # slots == 0: (start, end, tokens)
        self._instant = (
            profile.slots == 0
            and profile.prefill_tps == 0
            and profile.decode_tps == 0
            and profile.overhead_s == 0
            and profile.rpm == 0
            and profile.tpm == 0
        )
        #: :meth:`plan_instant` may serve calls: instant and no client CPU to spend first
        self.instant = self._instant and profile.client_overhead_s == 0
        self._seed_str = str(seed)
        self._cpt = (profile.text_cpt_median, profile.text_cpt_sigma)  # replies' chars/token
        self._tokenizer = get_tokenizer(profile.tokenizer)
        # "chars:R" profiles: R, for the single-message shortcut of _digest; 0 otherwise
        self._chars_per_token = (
            self._tokenizer.chars_per_token if isinstance(self._tokenizer, CharsTokenizer) else 0.0
        )
        # the tokenizer counts what messages add to a prefix (sim_slots.prefix_digest)
        self._extends = hasattr(self._tokenizer, "added_tokens")
        # length law per (call, stage, topology, round, task_category) labels:
        # SimProfile.length_dist, cached
        self._length_cache: dict[tuple[Any, ...], tuple[LengthDist, float]] = {}
        # ((params, what plan_instant needs of them or None), the pair before): one
        # attribute, swapped whole, so threads sharing this server never see the knobs of
        # another params dict; two, as callers alternate two (a thread's tool call, then
        # its answer to the result)
        self._knobs: tuple[tuple[dict[str, Any] | None, _Knobs | None], ...] = ((None, None),)
        self._rpm_level = profile.rpm / 60.0 * profile.burst_s
        self._tpm_level = profile.tpm / 60.0 * profile.burst_s
        self._bucket_t = clock.now()
        # counters (vLLM-like)
        self.requests_total = 0
        self.rejected_total = 0
        self.prompt_tokens_total = 0
        self._gen_unbatched = 0  # finished tokens of the slots == 0 path
        self._rate_t = clock.now()
        self._rate_tokens = 0
        self._client_free = -math.inf  # when the calling process's CPU is next free
        self._client_draws = 0
        #: faulty answers sent to clients, by kind (injected draws, quota 429s, deadlines)
        self.faults: dict[str, int] = {"rate_limited": 0, "timeout": 0, "malformed": 0}

    async def dispatch(self) -> None:
        """Spend the client-side CPU of one request (``client_overhead_s``), serially.

        Requests issued together (a fan-out) are sent one after another, each costing a
        log-normally jittered share of CPU (deterministic per seed), so their start times
        differ by milliseconds as they do with a real client, never by exactly zero.
        """
        if self.profile.client_overhead_s <= 0:
            return
        now = self.clock.now()
        await self.clock.sleep(self.dispatch_at(now) - now)

    def dispatch_at(self, now: float) -> float:
        """The client-CPU share of one request issued at ``now``, at an explicit time.

        Draws the share and books it on the client queue (:meth:`dispatch` without the
        wait); returns when the request is sent. The record's ``start`` is then
        ``now + (ready - now)``, as a clock computes the wake-up of that sleep. Shares are
        drawn in call order, so callers must book the requests in the order they were
        issued. With no client overhead nothing is booked and ``now`` is returned.
        """
        mean = self.profile.client_overhead_s
        if mean <= 0:
            return now
        self._client_draws += 1
        ready = max(now, self._client_free) + mean * self._share(self._client_draws)
        self._client_free = ready
        return ready

    def next_send(self, now: float) -> float:
        """When the next request would be sent if issued at ``now`` (nothing is booked):
        a lower bound on the ``start`` of every request issued at ``now`` or later."""
        mean = self.profile.client_overhead_s
        if mean <= 0:
            return now
        ready = max(now, self._client_free) + mean * self._share(self._client_draws + 1)
        return now + (ready - now)

    def _share(self, draw: int) -> float:
        """The jitter factor of the client's ``draw``-th request (deterministic per seed)."""
        u = Rng(self.seed * 1_000_003 + draw).random()
        return _lognormal_factor(u, self.profile.client_overhead_sigma)

    # --- planning --------------------------------------------------------------------

    def plan(
        self,
        messages: list[dict[str, Any]],
        *,
        attempt: int = 0,
        spec: OutputSpec | None = None,
        tools: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        timeout: float = math.inf,
        labels: dict[str, Any] | None = None,
        prompt_tokens: int | None = None,
    ) -> SimResult:
        """Decide content and faults of one attempt and queue it (no waiting happens here).

        ``first_token``/``end`` of the result are the engine's current prediction, a lower
        bound that :meth:`wait`/:meth:`chunks` refine. ``prompt_tokens``: the prompt's
        tokens when the caller counted them (a raw-text prompt, :meth:`raw_prompt_tokens`:
        no chat template); else the profile's tokenizer counts the rendered chat prompt.
        """
        p = self.profile
        params = params or {}
        now = self.clock.now()
        extra = ""
        if spec is not None:
            extra = spec.name
        if tools:
            extra += "|" + ",".join([str(t.get("function", t).get("name")) for t in tools])
        h, counted = self._digest(messages, extra, tools)
        raw = prompt_tokens is not None  # counted by the caller: a raw-text prompt
        prompt_tokens = counted if prompt_tokens is None else prompt_tokens
        if p.truncate_to_len:
            prompt_tokens = self._cut(prompt_tokens, params)
        self.requests_total += 1

        # Faults are drawn per attempt number (the client's retries and, through
        # ``prior_attempts``, an agent-step retry count on), so a retry can succeed;
        # content is not. Each attempt's draw is independent of the others (_fault_u).
        fault = None
        p_rl = float(params.get("sim_p_rate_limit", p.p_rate_limit))
        p_to = float(params.get("sim_p_timeout", p.p_timeout))
        p_mal = float(params.get("sim_p_malformed", p.p_malformed))
        malformed = False
        if p_rl or p_to or p_mal:
            u = _fault_u(h, attempt)
            if u < p_rl:
                fault = "rate_limited"
            elif u < p_rl + p_to:
                fault = "timeout"
            elif u < p_rl + p_to + p_mal:
                malformed = True

        rng = Rng(h)
        text, calls, n, finish = self._content(rng, spec, tools, params, malformed, labels)
        text, calls, n, finish = play_along_reply(
            messages, tools, params, rng, (text, calls, n, finish), malformed
        )
        res = SimResult(text, prompt_tokens, n, now, 0.0, now, now, finish, tool_calls=calls)
        if self._instant and fault is None:
            self.prompt_tokens_total += prompt_tokens
            self._gen_unbatched += n
            if malformed:
                res.malformed = True
                self.faults["malformed"] += 1
            return res
        if fault is None and not self._take_quota(now, prompt_tokens + n):
            fault = "rate_limited"
        if fault is None and malformed:
            # counted as sent now; _fault_error takes it back if it times out undelivered
            res.malformed = True
            self.faults["malformed"] += 1
        if fault == "rate_limited":
            self.rejected_total += 1
            res.fault, res.fault_at = fault, now + p.rate_limit_s
            return res
        if fault == "timeout":
            res.fault, res.fault_at = fault, now + min(p.hang_s, timeout)
            return res
        self.prompt_tokens_total += prompt_tokens
        # its own stream, independent of the content draws of Rng(h) (seeds that differ in
        # a few bits give correlated LCG streams: speed would follow length)
        speed = _lognormal_factor(
            Rng(zlib.crc32(h.to_bytes(4, "little"), 0x5EED)).random(), p.decode_jitter
        )
        if p.slots > 0:
            hashes = (
                _block_hashes(messages, tools, prompt_tokens, p, self._tokenizer, raw)
                if p.prefix_caching
                else ()
            )
            self._enqueue(res, now, timeout, speed, hashes)
        else:
            self._unbatched(res, now, timeout, speed)
        return res

    def _digest(
        self,
        messages: list[dict[str, Any]],
        extra: str,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[int, int]:
        """(request hash, prompt tokens) of a request.

        The hash is :func:`~agentlab.llm.sim_content.request_hash` (the same join of the
        same parts); the tokens are the profile's tokenizer's count of the whole prompt
        (:mod:`agentlab.llm.tokens`: every message text, content parts, tool schemas, the
        chat template).
        """
        tok = self._tokenizer
        if not tools and len(messages) == 1:  # a single-turn call: one f-string, no join
            m = messages[0]
            c, role = m.get("content"), m.get("role", "")
            if type(c) is str and type(role) is str:  # else the join (and its errors) below
                text = f"{self._seed_str}\x1f{extra}\x1f{role}\x1f{c}"
                ratio = self._chars_per_token
                n = 4 + int(len(c) / ratio) if ratio else tok.prompt_tokens(messages)
                return zlib.crc32(text.encode("utf-8", "surrogatepass")), n
        if self._extends:  # a count summed over messages: the new ones only
            h, n = prefix_digest(self._seed_str, extra, messages, tok)
            return h, n + tok.tools_delta(messages, tools)  # type: ignore[attr-defined]
        parts = [self._seed_str, extra]
        for m in messages:
            c = m.get("content")
            parts.append(m.get("role", ""))
            parts.append(c if isinstance(c, str) else repr(c))
        h = zlib.crc32("\x1f".join(parts).encode("utf-8", "surrogatepass"))
        return h, tok.prompt_tokens(messages, tools)

    @property
    def tokenizer(self) -> Tokenizer:
        """The profile's tokenizer (counts; ids where its vocabulary is exact)."""
        return self._tokenizer

    def chat_prompt_tokens(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """Tokens of a chat prompt as :meth:`plan` counts it (the profile's tokenizer, chat
        template and tool schemas included), without planning anything."""
        return self._tokenizer.prompt_tokens(messages, tools)

    def raw_prompt_tokens(self, text: str) -> int:
        """Tokens of a prompt sent as raw text (``/v1/completions``), as the profile's
        tokenizer counts it: no chat template, the special tokens the server adds."""
        return self._tokenizer.raw_prompt_tokens(text)

    def _reply_cap(self, params: dict[str, Any]) -> int:
        """The completion cap of a request: its ``max_tokens`` (or
        ``max_completion_tokens``), else the profile's ``max_completion``."""
        return int(
            params.get("max_tokens")
            or params.get("max_completion_tokens")
            or self.profile.max_completion
        )

    def _cut(self, prompt_tokens: int, params: dict[str, Any]) -> int:
        """A prompt's tokens after the front end's cut (``truncate_to_len``): at most
        ``truncate_to_len - max_tokens - truncate_margin``, at least 1; the engine prefills
        and caches the head that is kept."""
        p = self.profile
        return min(
            prompt_tokens, max(1, p.truncate_to_len - self._reply_cap(params) - p.truncate_margin)
        )

    def plan_instant(
        self, messages: list[dict[str, Any]], params: dict[str, Any], labels: dict[str, Any] | None
    ) -> tuple[str, int, int, str] | None:
        """:meth:`plan` of a free-text attempt on an instant server that cannot fail, cheaply.

        Returns ``(text, prompt tokens, completion tokens, finish reason)`` — exactly what
        :meth:`plan` would answer, with the same counters updated — or ``None`` when the
        request needs :meth:`plan` (faults possible, a program-writing prompt, parameters
        that do not convert, a cap that would leave the reply empty); then nothing changed.
        For ``sim/instant`` this is most of an agent-step's LLM call: the parameters are
        converted once per distinct ``params`` (not per call) and no ``SimResult`` is built.
        The caller offers no tools and asks for no structured output.
        """
        # Everything that can raise comes before the first change of state: a request that
        # plan() would fail on is declined here with nothing changed, and plan() then
        # raises it with its own side effects.
        try:
            k = self._knobs_of(params)
            if k is None or (messages and asks_for_program(messages)):
                return None
            h, prompt_tokens = self._digest(messages, "")
            if self.profile.truncate_to_len:
                prompt_tokens = self._cut(prompt_tokens, params)
            rng = Rng(h)
            n = k.n_fixed
            if n is None:
                n = self._draw_length(labels, rng)
        except Exception:
            return None
        if n < 1:
            n = 1
        self.requests_total += 1
        if n >= k.cap:  # cut (vLLM checks the length before EOS): no marker comes
            text, n, finish = gen_reply(rng, k.cap, *self._cpt)[:-1], k.cap, "length"
        else:
            text, finish = gen_reply(rng, n, *self._cpt), "stop"
            if k.marker:  # a marker the caller parses, at rate sim_marker_p
                text = append_marker(text, rng, k.marker, k.marker_p)
        self.prompt_tokens_total += prompt_tokens
        self._gen_unbatched += n
        return text, prompt_tokens, n, finish

    def answers_at_once(self, params: dict[str, Any]) -> bool:
        """Whether :meth:`plan` answers an attempt with these parameters and no structured
        output on this server at once (ready when planned) and well-formed: an instant
        server, no fault possible, no cap or stop string that could leave the reply empty.
        A value that does not convert is a ``False`` here (:meth:`plan` raises it)."""
        if not self.instant:
            return False
        try:
            return self._knobs_of(params) is not None
        except Exception:
            return False

    def _knobs_of(self, params: dict[str, Any]) -> _Knobs | None:
        """:meth:`_derive_knobs` of ``params``, remembered for the last two distinct ones."""
        for derived_for, k in self._knobs:
            if params == derived_for:
                return k
        return self._derive_knobs(params)

    def _derive_knobs(self, params: dict[str, Any]) -> _Knobs | None:
        """Convert the parameters :meth:`plan_instant` reads as :meth:`plan` and
        :meth:`_content` do, once per distinct ``params``. ``None`` (remembered too) when
        a call with them needs :meth:`plan`: faults possible, an empty reply; a value that
        does not convert raises, with the refusal already remembered.
        """
        p = self.profile
        snapshot = dict(params)
        earlier = self._knobs[0]
        self._knobs = ((snapshot, None), earlier)
        faults = (
            float(params.get("sim_p_rate_limit", p.p_rate_limit))
            or float(params.get("sim_p_timeout", p.p_timeout))
            or float(params.get("sim_p_malformed", p.p_malformed))
        )
        float(params.get("sim_bool_p", p.bool_p))  # converted by plan() too: may raise
        float(params.get("sim_p_invalid_args", INVALID_ARGS_P))  # likewise (play_along)
        cap = self._reply_cap(params)
        n_fixed = params.get("sim_completion_tokens")
        n_fixed = None if n_fixed is None else int(n_fixed)
        marker = params.get("sim_marker")
        marker_p = float(params.get("sim_marker_p", 1.0))
        # cap < 1 would leave the reply empty (a malformed answer: plan() and a retry)
        vllm_extras = params.get("stop") or params.get("min_tokens")  # plan() applies them
        if faults or vllm_extras or cap < 1 or not (marker is None or isinstance(marker, str)):
            return None
        knobs = _Knobs(cap, n_fixed, marker, marker_p)
        self._knobs = ((snapshot, knobs), earlier)
        return knobs

    def _content(
        self,
        rng: Rng,
        spec: OutputSpec | None,
        tools: list[dict[str, Any]] | None,
        params: dict[str, Any],
        malformed: bool,
        labels: dict[str, Any] | None = None,
    ) -> tuple[str, list[tuple[str, str, str]], int, str]:
        """(text, tool calls, completion tokens, finish reason) of one attempt."""
        p = self.profile
        bool_p = float(params.get("sim_bool_p", p.bool_p))
        cap = self._reply_cap(params)
        if tools:
            choice = params.get("tool_choice", "auto")
            forced = None
            if isinstance(choice, dict):
                forced = choice.get("function", {}).get("name")
            tool_p = float(params.get("sim_tool_call_p", p.tool_call_p))
            if choice != "none" and (choice == "required" or forced or rng.random() < tool_p):
                name, args = gen_tool_call(tools, rng, bool_p=bool_p, name=forced)
                raw = dumps_acyclic(args)
                if malformed:
                    raw = raw[: max(1, len(raw) // 2)]
                call_id = f"call_{rng.randint(1 << 30):08x}"
                return "", [(call_id, name, raw)], max(1, len(raw) // 4 + 8), "tool_calls"
        n_fixed = params.get("sim_completion_tokens")
        target = int(n_fixed) if n_fixed is not None else self._draw_length(labels, rng)
        # vLLM's min_tokens: no EOS (nor stop string) before that many tokens
        target = max(1, target, int(params.get("min_tokens") or 0))
        target = min(target, cap + 1)  # a reply that never stops (sim_lengths.NO_STOP): cut
        if spec is not None:
            text, n = gen_json(spec.schema, rng, target, bool_p=bool_p)
            if malformed:
                return text[: max(1, len(text) // 2)], [], max(1, n // 2), "length"
            if n > cap:  # cut mid-JSON, as a real server does: the client cannot parse it
                return text[: cap * 4], [], cap, "length"
            return text, [], n, "stop"
        if malformed:
            return "", [], 0, "length"
        stop = params.get("stop")
        if target >= cap:  # cut (vLLM checks the length before EOS): no marker comes
            text, n, finish = gen_reply(rng, cap, *self._cpt)[:-1], cap, "length"
        else:
            # free text only: a marker the caller parses ("[CONSENSUS]"), at rate sim_marker_p
            marker = params.get("sim_marker")
            text = append_marker(
                gen_reply(rng, target, *self._cpt),
                rng,
                marker,
                float(params.get("sim_marker_p", 1.0)),
            )
            n, finish = target, "stop"
        if stop:  # vLLM's stop strings: the reply ends at the first, which is removed
            return cut_at_stop(text, n, finish, stop, int(params.get("min_tokens") or 0))
        return text, [], n, finish

    def _draw_length(self, labels: dict[str, Any] | None, rng: Rng) -> int:
        """A reply length for a call: its law (:meth:`SimProfile.length_dist`) at a normal
        score, the call's own draw, or with a ``length_corr`` the mix ``sqrt(rho) * g +
        sqrt(1 - rho) * own`` with the score ``g`` its group shares (:meth:`_group_score`).
        The call's own draw is taken either way, so the reply's content stream is the same."""
        dist, rho = self._length_law(labels)
        z = rng.normal()
        if rho and labels:
            group = labels.get(self.profile.length_corr_by)
            if group is not None:
                z = math.sqrt(rho) * self._group_score(group) + math.sqrt(1.0 - rho) * z
        return int(dist.at(z) + 0.5)

    def _group_score(self, group: Any) -> float:
        """The standard-normal score of a ``length_corr_by`` group (a run): a function of
        the seed and the group's label value alone, so every call of the group, in any
        order, after a resume or on another worker, draws the same."""
        key = f"{self._seed_str}\x1f{group}".encode()
        return Rng(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")).normal()

    def _length_law(self, labels: dict[str, Any] | None) -> tuple[LengthDist, float]:
        """:meth:`SimProfile.length_dist` and :meth:`SimProfile.length_rho` of a call's
        labels, cached per label values."""
        if not labels:
            key: tuple[Any, ...] = ()
        else:
            g = labels.get
            key = (g("call"), g("stage", g("label")), g("topology"), g("round"), g("task_category"))
        law = self._length_cache.get(key)
        if law is None:
            if len(self._length_cache) > 4096:
                self._length_cache.clear()
            law = (self.profile.length_dist(labels), self.profile.length_rho(labels))
            self._length_cache[key] = law
        return law

    def _take_quota(self, now: float, tokens: int) -> bool:
        p = self.profile
        if p.rpm == 0 and p.tpm == 0:
            return True
        dt = max(0.0, now - self._bucket_t)
        self._bucket_t = now
        if p.rpm:
            self._rpm_level = min(p.rpm / 60.0 * p.burst_s, self._rpm_level + dt * p.rpm / 60.0)
            if self._rpm_level < 1.0:
                return False
        if p.tpm:
            cap = p.tpm / 60.0 * p.burst_s
            self._tpm_level = min(cap, self._tpm_level + dt * p.tpm / 60.0)
            if self._tpm_level < min(tokens, cap):
                return False
            self._tpm_level -= tokens
        if p.rpm:
            self._rpm_level -= 1.0
        return True

    def _enqueue(
        self, res: SimResult, now: float, timeout: float, speed: float, hashes: tuple[int, ...]
    ) -> None:
        engine = self.engine
        engine.advance(now)
        req = EngineRequest(
            self.requests_total,
            now + self.profile.overhead_s,
            max(1, res.prompt_tokens),
            max(1, res.completion_tokens),
            speed,
            now + timeout,
            hashes=hashes,
        )
        engine.add(req)
        res.req = req
        self._refresh(res, engine.predict(req))
        if res.end > req.deadline:  # already certain: later arrivals only delay it
            res.fault, res.fault_at = "timeout", req.deadline

    def _unbatched(self, res: SimResult, now: float, timeout: float, speed: float) -> None:
        p = self.profile
        tpot = 1.0 / (p.decode_tps * speed) if p.decode_tps else 0.0
        prefill = res.prompt_tokens / p.prefill_tps if p.prefill_tps else 0.0
        first = now + p.overhead_s + prefill + (1.0 / p.decode_tps if p.decode_tps else 0.0)
        end = first + (res.completion_tokens - 1) * tpot
        deadline = now + timeout
        res.queue_wait, res.first_token, res.end = 0.0, first, end
        if end > deadline:
            res.fault, res.fault_at = "timeout", deadline
        self._active.append(
            (now, min(end, deadline), res.completion_tokens if end <= deadline else 0)
        )
        if len(self._active) > 256:
            self._prune(now)
