"""Status colours: one per approach status and trial state (and "waiting for your verdict"), defined
once in static/app.css, far enough apart to tell at a glance; a trial's state badge uses its own."""

import itertools
import math
import re

from app.models import ApproachStatus, TrialState
from app.state import app_state
from tests.support.colours import CSS, colours

NAMES = sorted({s.value for s in ApproachStatus} | {s.value for s in TrialState} | {"awaiting"})


def lab(hex_colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB colour."""

    def linear(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(int(hex_colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x, y, z = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    f = lambda v: v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116  # noqa: E731
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_every_status_and_state_has_its_own_colour_defined_once():
    defined = colours()
    assert set(NAMES) <= set(defined), set(NAMES) - set(defined)
    for name in NAMES:
        assert re.search(rf"\.badge-{name} {{ background: var\(--status-{name}\); }}", CSS), name
    # Pairwise CIE76 distance: 15 is clearly different side by side (2.3 is "just noticeable").
    closest = min((math.dist(lab(defined[a]), lab(defined[b])), a, b) for a, b in itertools.combinations(NAMES, 2))
    assert closest[0] >= 15, closest
    assert defined["succeeded"] != defined["promising"]


def test_trial_state_badge_uses_the_state_colour(app):
    template = app_state(app).templates.env.get_template("_partials/trial_state.html")
    for state in TrialState:
        html = template.render(state=state.value)
        assert f'class="badge badge-{state.value}"' in html, html
