"""Live notebook widgets over a run log (layer 7): anywidget classes that read the log.

``show(run)`` / ``live(society)`` / ``live(experiment)`` compose :class:`SocietyView`,
:class:`ExperimentView`, :class:`ConversationView`, :class:`IATHistogram` and
:class:`HumanInput`. Importing this package imports anywidget;
without the ``viz`` extra it raises :class:`~agentlab.errors.MissingExtraError` (an
``ImportError``) saying how to install it.
"""

try:
    from agentlab.viz.conversation import ConversationView
    from agentlab.viz.dashboard import Dashboard, live, show
    from agentlab.viz.experiment_view import ExperimentView
    from agentlab.viz.human_input import HumanInput
    from agentlab.viz.iat import IATHistogram
    from agentlab.viz.society_view import SocietyView
except ModuleNotFoundError as exc:
    from agentlab.errors import MissingExtraError

    missing = MissingExtraError.from_import(exc, "agentlab.viz (show, live, the widgets)")
    if missing is None:
        raise
    raise missing from None

__all__ = [
    "ConversationView",
    "Dashboard",
    "ExperimentView",
    "HumanInput",
    "IATHistogram",
    "SocietyView",
    "live",
    "show",
]
