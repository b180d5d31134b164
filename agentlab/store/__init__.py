"""Layer 3: the run directory — atomic writes, agent stores, the run log and its readers.

Writing: :class:`ReplaySink` (rows), :class:`Tracer` (spans), :func:`write_manifest`;
every dataset's columns are declared once in :mod:`agentlab.store.catalog`. Reading: :func:`open_run` → :class:`Run`; :func:`sql_over_runs`
for one query over many runs. Crash-safe ticks:
:func:`log_offsets` / :func:`truncate_log`. DuckDB and pandas are imported only when a
reader needs them.
"""

from agentlab.store.agent_store import AgentStore, DirectoryStore
from agentlab.store.agent_view import AgentView
from agentlab.store.atomic import atomic_write_bytes, atomic_write_json, read_json
from agentlab.store.lifecycle import RunStatus, mark_status, read_status
from agentlab.store.manifest import finish_manifest, read_manifest, write_manifest
from agentlab.store.multi import sql_over_runs
from agentlab.store.offsets import log_offsets, truncate_log
from agentlab.store.replay import ReplaySink, get_replay_sink
from agentlab.store.run import Run, open_run
from agentlab.store.summary import ErrorCounts, RunSummary, summarize_run
from agentlab.store.schema import COLUMN_TYPES, load_schema
from agentlab.store.trace import Span, Tracer, get_tracer

__all__ = [
    "COLUMN_TYPES",
    "AgentStore",
    "AgentView",
    "DirectoryStore",
    "ErrorCounts",
    "ReplaySink",
    "Run",
    "RunStatus",
    "RunSummary",
    "Span",
    "Tracer",
    "atomic_write_bytes",
    "atomic_write_json",
    "finish_manifest",
    "get_replay_sink",
    "get_tracer",
    "load_schema",
    "log_offsets",
    "mark_status",
    "open_run",
    "read_json",
    "read_manifest",
    "read_status",
    "sql_over_runs",
    "summarize_run",
    "truncate_log",
    "write_manifest",
]
