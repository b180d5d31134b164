"""Live notebook widgets over a run log (layer 7): anywidget classes that read the log.

``show(run)`` / ``live(society)`` compose :class:`SocietyView`, :class:`ConversationView`,
:class:`IATHistogram` and :class:`HumanInput`. Importing this package imports anywidget.
"""

from agentlab.viz.conversation import ConversationView
from agentlab.viz.dashboard import Dashboard, live, show
from agentlab.viz.human_input import HumanInput
from agentlab.viz.iat import IATHistogram
from agentlab.viz.society_view import SocietyView

__all__ = [
    "ConversationView",
    "Dashboard",
    "HumanInput",
    "IATHistogram",
    "SocietyView",
    "live",
    "show",
]
