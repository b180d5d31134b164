"""Layer 6: coordination-topology traffic experiments (AgentVerse-style workflow)."""

from agentlab.topology.experiment import Experiment, ExperimentResults
from agentlab.topology.models import (
    DiscussionTurn,
    Evaluation,
    ExpertSpec,
    PeerMessage,
    Review,
    recruitment_model,
)
from agentlab.topology.protocols import PROTOCOLS, full_mesh, sequential, star
from agentlab.topology.recorder import Recorder, RecordingClient, call_row
from agentlab.topology.tasks import FALLBACK_TASKS, load_tasks
from agentlab.topology.workflow import STAGES, RunContext, WorkflowConfig, run_workflow

__all__ = [
    "FALLBACK_TASKS",
    "PROTOCOLS",
    "STAGES",
    "DiscussionTurn",
    "Evaluation",
    "Experiment",
    "ExperimentResults",
    "ExpertSpec",
    "PeerMessage",
    "Recorder",
    "RecordingClient",
    "Review",
    "RunContext",
    "WorkflowConfig",
    "call_row",
    "full_mesh",
    "load_tasks",
    "recruitment_model",
    "run_workflow",
    "sequential",
    "star",
]
