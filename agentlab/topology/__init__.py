"""Layer 6: coordination-topology traffic experiments (AgentVerse-style workflow)."""

from agentlab.topology.experiment import Experiment, ExperimentResults
from agentlab.topology.models import (
    DiscussionTurn,
    Evaluation,
    Expert,
    ExpertSpec,
    PeerMessage,
    RecruitedExpert,
    Review,
    expert_team_model,
    recruitment_model,
)
from agentlab.topology.prompts import (
    APPROVED,
    CONSENSUS,
    TRUNCATION_NOTE,
    has_approval,
    has_consensus,
    parse_evaluation,
    truncate_history,
)
from agentlab.topology.protocols import PROTOCOLS, full_mesh, sequential, star
from agentlab.topology.rates import workflow_rates, workflow_rates_df
from agentlab.topology.recorder import sample_metrics
from agentlab.topology.tasks import FALLBACK_TASKS, load_tasks
from agentlab.topology.workflow import (
    PAPER_CONSENSUS_RATES,
    PAPER_PASS_RATES,
    STAGES,
    STYLES,
    RunContext,
    WorkflowConfig,
    run_workflow,
)

__all__ = [
    "APPROVED",
    "CONSENSUS",
    "FALLBACK_TASKS",
    "PAPER_CONSENSUS_RATES",
    "PAPER_PASS_RATES",
    "PROTOCOLS",
    "STAGES",
    "STYLES",
    "TRUNCATION_NOTE",
    "DiscussionTurn",
    "Evaluation",
    "Experiment",
    "ExperimentResults",
    "Expert",
    "ExpertSpec",
    "PeerMessage",
    "RecruitedExpert",
    "Review",
    "RunContext",
    "WorkflowConfig",
    "expert_team_model",
    "full_mesh",
    "has_approval",
    "has_consensus",
    "load_tasks",
    "parse_evaluation",
    "recruitment_model",
    "run_workflow",
    "sample_metrics",
    "sequential",
    "star",
    "truncate_history",
    "workflow_rates",
    "workflow_rates_df",
]
