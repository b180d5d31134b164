"""What one topology run is configured with and what its stages share: the stage and
style names, the paper's consensus and pass rates, :class:`WorkflowConfig` and
:class:`RunContext` (its own module so the protocols can name the context without
importing the workflow that drives them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentlab.core.clock import Clock
from agentlab.errors import ConfigError
from agentlab.messaging import CompletionClient, MessageSink, Msg

if TYPE_CHECKING:
    from agentlab.store.trace import Span

__all__ = [
    "PAPER_CONSENSUS_RATES",
    "PAPER_PASS_RATES",
    "STAGES",
    "STYLES",
    "RunContext",
    "WorkflowConfig",
]

STAGES = ("recruitment", "discussion", "synthesis", "execution", "evaluation", "final")
STYLES = ("free_text", "structured")

#: P(every expert of round r signals agreement) — Star: every reviewer approves — measured
#: on the paper's 1,481 runs, N = 4: agentraffic ``ui/data/public/workflow.json``,
#: ``groups.all.<topology>.consensus.per_round[r].rate`` (agreed / reached); per task
#: category ``<topology>/<category>``: ``groups.<category>.<topology>`` (the categories differ
#: most: a Sequential math discussion never agrees in round 1, a research one 29 % of the
#: time; Star's reviewers never all approve in any category). Round 3's rate only marks
#: the round (the discussion ends there either way): Full mesh research's 0 is 1 discussion.
PAPER_CONSENSUS_RATES: dict[str, tuple[float, ...]] = {
    "sequential": (0.07178, 0.2654, 0.2679),
    "star": (0.0, 0.0, 0.0),
    "full_mesh": (0.3966, 0.6244, 0.5338),
    # reached 175 / 175 / 170, 126 / 89 / 29, 156 / 156 / 142, 156 / 149 / 77 discussions
    "sequential/math": (0.0, 0.02857, 0.1294),
    "sequential/research": (0.2937, 0.6742, 0.6552),
    "sequential/consulting": (0.0, 0.08974, 0.2183),
    "sequential/coding": (0.04487, 0.4832, 0.5195),
    # reached 187 / 170 / 68, 130 / 43 / 1, 161 / 145 / 72, 175 / 36 / 7
    "full_mesh/math": (0.09091, 0.6, 0.6324),
    "full_mesh/research": (0.6692, 0.9767, 0.0),
    "full_mesh/consulting": (0.09938, 0.5034, 0.4444),
    "full_mesh/coding": (0.7943, 0.8056, 0.5714),
}
#: P(an iteration is accepted by the evaluator), same file: ``retries``:
#: 1 - not_accepted.iterations / iterations (sequential 115/613, star 186/653, mesh 164/653);
#: per task category from ``groups.<category>.<topology>.retries`` (Star coding 109/214: its
#: runs retry most, so they hold a third of Star's discussions).
PAPER_PASS_RATES: dict[str, float] = {
    "sequential": 0.8124, "star": 0.7152, "full_mesh": 0.7489,
    "sequential/math": 0.7029, "sequential/research": 0.9921,  # 52/175, 1/126
    "sequential/consulting": 0.8013, "sequential/coding": 0.8013,  # 31/156, 31/156
    "star/math": 0.7847, "star/research": 0.8378,  # 31/144, 24/148
    "star/consulting": 0.8503, "star/coding": 0.4907,  # 22/147, 109/214
    "full_mesh/math": 0.6417, "full_mesh/research": 0.9615,  # 67/187, 5/130
    "full_mesh/consulting": 0.7702, "full_mesh/coding": 0.6857,  # 37/161, 55/175
}  # fmt: skip


def _rates_default() -> dict[str, tuple[float, ...]]:
    return dict(PAPER_CONSENSUS_RATES)


def _pass_default() -> dict[str, float]:
    return dict(PAPER_PASS_RATES)


_T = TypeVar("_T")


def _by_category(table: Mapping[str, _T], topology: str, category: str | None, default: _T) -> _T:
    """``table["topology/category"]`` where given, else ``table[topology]``, else
    ``default``: the lookup of both rate tables."""
    hit = table.get(f"{topology}/{category}") if category else None
    return table.get(topology, default) if hit is None else hit


@dataclass(frozen=True)
class WorkflowConfig:
    """Knobs of one run; defaults are the paper's setting (source in brackets).

    Args:
        agents: experts N (>= 2) [paper: 4, ``force_agent_count``].
        rounds: discussion rounds at most; Star: solver iterations [orchestrator: 3;
            ``run_agentverse.sh -r 3`` for full mesh].
        max_parallel: full-mesh worker pool [``MAX_PARALLEL_WORKERS`` = 5].
        style: ``"free_text"`` (markers in the text) or ``"structured"`` (pydantic replies).
        early_stop: stop the discussion at the first round where all agree (Star: all
            approve). The paper's runs stop there (``workflow.json`` notes: "The loop stops
            at the first round where every agent signals agreement"); the public
            repository's current main branch completes all rounds (``early_stop=False``).
        consensus_rates: per topology, per round, P(the whole round agrees) on a simulated
            backend [:data:`PAPER_CONSENSUS_RATES`]; a key ``topology/category`` holds the
            rates of the tasks of that ``category`` (looked up first); rounds past the
            tuple use its last value. Each of the k turns of a round carries the marker
            independently with ``q = rate ** (1 / k)``, k taken at ``rates_agents``
            experts and held fixed for other N (an expert's tendency to agree does not
            know N).
        rates_agents: the N the rates were measured at [4].
        pass_rates: per topology (and ``topology/category``, as above), P(the
            evaluator's reply scores ``pass_score``) on a simulated backend
            [:data:`PAPER_PASS_RATES`]; otherwise the reply has no score, which the
            original scores 0 ("unscored").
        pass_score: the score a simulated passing evaluation gives [92, the paper's median
            final score, ``workflow.json`` ``quality.score.median``].
        threshold: score needed to accept; 0 = the evaluator's ``goal_achieved`` decides
            [orchestrator ``success_threshold`` = 70].
        max_iterations: recruitment → evaluation loops at most [3].
        history_chars: discussion-history cap in characters
            [``DISCUSSION_HISTORY_MAX_CHARS`` = 6000].
        context_chars: characters of the plan in the execution prompt's context [500].
        eval_prompt_chars: evaluation prompt cap; the oldest results are cut
            [``EVAL_MAX_PROMPT_CHARS`` = 20000].
        result_chars: per-result cap in the final prompt [8000].
        max_tokens: completion cap of every free-text call (discussion turns, synthesis,
            execution, evaluation, final); 0 = none: the client's default, synthesis 2048,
            final 4096 [the paper's server caps all calls at ``LLM_MAX_TOKENS`` = 6144].
            Structured calls (recruitment, ``style="structured"`` turns) keep the client's
            default, since a cut JSON reply cannot be parsed.
    """

    agents: int = 4
    rounds: int = 3
    max_parallel: int = 5
    style: str = "free_text"
    early_stop: bool = True
    consensus_rates: Mapping[str, tuple[float, ...]] = field(default_factory=_rates_default)
    rates_agents: int = 4
    pass_rates: Mapping[str, float] = field(default_factory=_pass_default)
    pass_score: int = 92
    threshold: int = 70
    max_iterations: int = 3
    history_chars: int = 6000
    context_chars: int = 500
    eval_prompt_chars: int = 20000
    result_chars: int = 8000
    max_tokens: int = 0

    def __post_init__(self) -> None:
        rates = {k: tuple(float(x) for x in v) for k, v in dict(self.consensus_rates).items()}
        passes = {k: float(v) for k, v in dict(self.pass_rates).items()}
        object.__setattr__(self, "consensus_rates", rates)
        object.__setattr__(self, "pass_rates", passes)
        checks = {
            "agents": self.agents >= 2,
            "rounds": self.rounds >= 1,
            "max_parallel": self.max_parallel >= 1,
            "max_iterations": self.max_iterations >= 1,
            "rates_agents": self.rates_agents >= 2,
            "style": self.style in STYLES,
            "threshold": 0 <= self.threshold <= 100,
            "pass_score": 0 <= self.pass_score <= 100,
            "consensus_rates": all(v and all(0 <= x <= 1 for x in v) for v in rates.values()),
            "pass_rates": all(0 <= x <= 1 for x in passes.values()),
            "history_chars": self.history_chars >= 0,
            "max_tokens": self.max_tokens >= 0,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            vals = {k: getattr(self, k) for k in bad}
            raise ConfigError(
                f"invalid workflow config {vals}: need agents>=2, rounds>=1, max_parallel>=1, "
                f"max_iterations>=1, rates_agents>=2, style in {STYLES}, threshold and "
                "pass_score in [0, 100], non-empty rate tuples in [0, 1], history_chars>=0, "
                "max_tokens>=0"
            )

    def round_rate(self, topology: str, rnd: int, category: str | None = None) -> float:
        """P(round ``rnd`` of ``topology`` agrees) for a task of ``category``: the rates
        keyed ``topology/category`` where given, else ``topology``'s; topologies without
        rates never agree."""
        rates = _by_category(self.consensus_rates, topology, category, (0.0,))
        return rates[min(rnd, len(rates)) - 1]

    def pass_rate(self, topology: str, category: str | None = None) -> float:
        """P(an iteration of ``topology`` on a task of ``category`` passes): keyed
        ``topology/category`` where given, else ``topology``'s, else 0."""
        return _by_category(self.pass_rates, topology, category, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able values (stored in ``run.json``)."""
        d = asdict(self)
        d["consensus_rates"] = {k: list(v) for k, v in self.consensus_rates.items()}
        d["pass_rates"] = dict(self.pass_rates)
        return d


@dataclass
class RunContext:
    """What the stages of one run share: client, config, identity, clock, message sink."""

    client: CompletionClient
    cfg: WorkflowConfig
    topology: str
    run_id: str
    task: dict[str, Any]
    clock: Clock
    sink: MessageSink | None = None
    simulated: bool = True
    stats: Counter[str] = field(default_factory=Counter)
    tracer: Any = None  # a store Tracer: each stage is an ``experiment.stage`` span

    def stage(self, name: str, iteration: int) -> AbstractContextManager[Span | None]:
        """The stage's span around a block (its calls' ``llm.call`` spans are children);
        a no-op without a tracer."""
        if self.tracer is None:
            return nullcontext()
        return self.tracer.trace_span("experiment.stage", **{
            "agentlab.stage": name, "agentlab.iteration": iteration,
            "agentlab.run_id": self.run_id})  # fmt: skip

    def labels(
        self, stage: str, iteration: int, rnd: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """The call labels of one call (``task_category`` where the task has a category:
        the simulated server's reply lengths differ by it, as the published ones do)."""
        out = {
            "stage": stage,
            "iteration": iteration,
            "round": rnd,
            "topology": self.topology,
            "run_id": self.run_id,
            "task_id": self.task["id"],
        }
        cat = self.task.get("category")
        if cat is not None:
            out["task_category"] = cat
        return out | extra

    def marker_p(self, rnd: int, turns_at_rates_n: int) -> float:
        """Per-turn marker probability for a round of ``turns_at_rates_n`` turns."""
        rate = self.cfg.round_rate(self.topology, rnd, self.task.get("category"))
        return rate ** (1.0 / max(1, turns_at_rates_n))

    def sim_kw(self, **kw: Any) -> dict[str, Any]:
        """Simulator overrides, for ``sim/`` backends only."""
        return kw if self.simulated else {}

    def record(self, sender: str, text: str, ts: float, to: list[str], iteration: int) -> None:
        """Put one discussion delivery into the messages dataset."""
        if self.sink is not None and to:
            self.sink.record(Msg(sender, text, ts=ts), to, "discussion", iteration)
