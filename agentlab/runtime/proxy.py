"""Old import path of the services object; see :mod:`agentlab.runtime.services`.

``ServiceProxy`` was renamed :class:`~agentlab.runtime.services.RunServices` when the
``Society``, ``Experiment`` and ``AgentSystem`` started sharing it; this alias keeps code
written against the old name importing.
"""

from agentlab.runtime.services import AgentContext, RecordingLLM, RunServices, derive_seed

ServiceProxy = RunServices

__all__ = ["AgentContext", "RecordingLLM", "RunServices", "ServiceProxy", "derive_seed"]
