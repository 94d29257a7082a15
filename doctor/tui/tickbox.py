"""A checkbox whose box is empty when it is off.

Textual draws an off checkbox as a dim `X` on a dark box, which reads as ticked in most
terminals (and in a terminal's text it *is* an X). The fix list's rows get the same
treatment in `doctor.tui.fix.RemedyList`.
"""

from __future__ import annotations

from textual.content import Content
from textual.style import Style
from textual.widgets import Checkbox


class Tickbox(Checkbox):
    """`▐X▌ label` when on, `▐ ▌ label` when off."""

    @property
    def _button(self) -> Content:
        # Textual's ToggleButton._button, with the inner mark only when the box is on.
        button_style = self.get_visual_style("toggle--button")
        side_style = Style(foreground=button_style.background, background=self.background_colors[1])
        return Content.assemble((self.BUTTON_LEFT, side_style),
                                (self.BUTTON_INNER if self.value else " ", button_style),
                                (self.BUTTON_RIGHT, side_style))
