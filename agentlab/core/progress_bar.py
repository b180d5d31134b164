"""Progress bars (tqdm.auto: a widget in notebooks, text in terminals) that a saved or
exported notebook still shows.

tqdm's notebook bar is an ipywidgets box whose output carries a ``text/plain`` taken when
it was displayed ("society: 0%| | 0/5"). Without a widget manager (an HTML export offline,
GitHub, ``agentlab paper``) a finished run's bar was blank or that frozen 0 %. Here the bar
is displayed with a display id and a ``text/html`` snapshot of its line, replaced by the
final line when it closes ("society: 100%|██| 5/5 [00:01, tick=5, errors=0]"), as the live
views' snapshots are (``viz/_base.py``). Live, JupyterLab still draws the widget.
"""

from __future__ import annotations

import html
import uuid
from functools import cache
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(
    total: int | None, desc: str, unit: str, *, initial: int = 0, enabled: bool = True
) -> Any:
    """A ``tqdm`` bar: the notebook kind (with its snapshot) in a kernel with ipywidgets,
    text elsewhere; a disabled one (every call a no-op) when not ``enabled``."""
    from tqdm.auto import tqdm

    # (by module name: importing tqdm.notebook in a script would import ipywidgets)
    notebook = any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)
    kind = _bar_class() if enabled and notebook else tqdm
    return kind(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled)


@cache  # one class, made on the first bar in a kernel
def _bar_class() -> type:
    from tqdm.notebook import tqdm as notebook_tqdm

    class SnapshotBar(notebook_tqdm):  # type: ignore[misc,valid-type]
        """tqdm's notebook bar, displayed with a display id and a text snapshot."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, display=False, **kwargs)
            self._display_id: str | None = None
            if self.disable:
                return
            from IPython.display import display

            self._display_id = uuid.uuid4().hex
            display(self._bundle(), raw=True, display_id=self._display_id)
            self.displayed = True

        def _bundle(self) -> dict[str, Any]:
            got = self.container._repr_mimebundle_()
            data = dict((got[0] if isinstance(got, tuple) else got) or {})
            line = str(self)  # tqdm's text line of the current state
            data["text/plain"] = line
            data["text/html"] = (
                '<pre class="agentlab-static-progress" style="margin:0;white-space:pre-wrap">'
                f"{html.escape(line)}</pre>"
            )
            return data

        def close(self) -> None:
            shown = self._display_id is not None and not self.disable
            super().close()
            if shown:
                from agentlab.core.kernel_display import update_everywhere

                assert self._display_id is not None
                update_everywhere(self._bundle(), self._display_id)

    return SnapshotBar
