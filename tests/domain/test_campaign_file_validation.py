"""One validation for a campaign's content (issue 21, item 3): a campaign file is checked by the models the
API checks its bodies with, so an import is refused whole, with the line and the field, for any value the
API would refuse."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from sqlmodel import select

from app.db import session_scope
from app.domain.campaign_files import import_campaign, parse_campaign_file
from app.domain.errors import Invalid
from app.models import Campaign
from app.schemas import ApproachCreate, CampaignCreate

FILE = """format: campaign-board/v1
campaign:
  slug: checked
  name: Checked
  hidden_size: 7168
approaches:
- key: a
  title: A
  requirements:
    gpus: 2
  recipe:
    kind: allreduce
    params: {backend: gloo}
    timeout_s: 300
- key: ok
  title: Fine
"""
LINES: dict[str, int] = {}
for n, line in enumerate(FILE.splitlines(), start=1):
    LINES.setdefault(line.strip("- ").split(":")[0], n)  # the first place each field is named


def _with(field: str, value: str) -> str:
    return FILE.replace(f"{field}: {FILE.split(field + ': ')[1].splitlines()[0]}", f"{field}: {value}", 1)


@pytest.mark.parametrize("value", ["1e309", "-5", "99999999999999999999999", ".inf", ".nan", "0", "'soon'"])
def test_a_timeout_the_api_refuses_refuses_the_whole_file_naming_its_line(engine, value):
    text = _with("timeout_s", value)
    with pytest.raises(Invalid) as refused:
        with session_scope(engine) as session:
            import_campaign(session, text, actor="test")
    assert refused.value.message.startswith(f"line {LINES['timeout_s']}: approaches[0] (a).recipe.timeout_s: ")
    assert refused.value.field == "approaches[0] (a).recipe.timeout_s"
    with session_scope(engine, write=False) as session:  # all or nothing: not even the good approach
        assert session.exec(select(Campaign).where(Campaign.slug == "checked")).first() is None


def test_a_recipe_param_its_kind_refuses_is_named_with_its_line():
    with pytest.raises(Invalid) as refused:
        parse_campaign_file(_with("params", "{backend: gloo, tokens: [0]}"))
    assert refused.value.message.startswith(f"line {LINES['params']}: approaches[0] (a).recipe.params.tokens: ")


def test_the_file_that_is_right_imports(engine):
    with session_scope(engine) as session:
        summary = import_campaign(session, FILE, actor="test")
    assert (summary.campaign, summary.created, summary.added) == ("checked", True, 2)


# Fields of each kind of place in a file: the campaign, an approach, its requirements, its recipe.
PLACES = {
    "hidden_size": ("campaign", "hidden_size"),
    "title": ("approach", "title"),
    "gpus": ("approach", "requirements", "gpus"),
    "timeout_s": ("approach", "recipe", "timeout_s"),
    "params": ("approach", "recipe", "params"),
}
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(min_value=-3, max_value=3), max_size=3),
    st.dictionaries(st.sampled_from(["tokens", "backend", "bogus"]), st.integers(-2, 9), max_size=2),
)


def _api_refuses(place: tuple[str, ...], value: object) -> bool:
    """What the API's own models say of the value at that place (the bodies of POST /api/campaigns, .../approaches)."""
    doc = yaml.safe_load(FILE)
    target = doc["campaign"] if place[0] == "campaign" else doc["approaches"][0]
    for part in place[1:-1]:
        target = target[part]
    target[place[-1]] = value
    try:
        CampaignCreate.model_validate(doc["campaign"])
        ApproachCreate.model_validate(doc["approaches"][0])
    except ValidationError:
        return True
    return False


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(PLACES)), value=VALUES)
def test_any_value_the_api_refuses_the_import_refuses_with_its_line(name, value):
    place = PLACES[name]
    if isinstance(value, float) and math.isnan(value) and name == "title":
        value = "nan"  # the same draw as a string: YAML has no NaN title
    dumped = yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()
    text = _with(name, dumped)
    assert yaml.safe_load(text) is not None
    if not _api_refuses(place, yaml.safe_load(f"v: {dumped}")["v"]):
        parse_campaign_file(text)  # the API takes it: so does the import
        return
    with pytest.raises(Invalid) as refused:
        parse_campaign_file(text)
    assert refused.value.message.startswith(f"line {LINES[name]}: "), (dumped, refused.value.message)
    assert name in (refused.value.field or ""), refused.value.field


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("  accept_length_by_k: {'1': 5.0}\n", "accept_length_by_k"),  # tau <= k + 1 (issue 32 item 7)
        ("  accept_length: 10\n  draft_steps: 3\n", "accept_length"),  # the value above its bound
        ("  accept_unconditional: [0.5, 0.6]\n", "accept_unconditional"),  # vLLM's rates cannot rise
    ],
)
def test_the_import_applies_the_acceptance_bounds(extra, field):
    with pytest.raises(Invalid) as refused:
        parse_campaign_file(FILE.replace("  hidden_size: 7168\n", "  hidden_size: 7168\n" + extra))
    assert field in (refused.value.field or ""), refused.value.message


def test_the_import_converts_vllm_rates():
    parsed = parse_campaign_file(
        FILE.replace("  hidden_size: 7168\n", "  hidden_size: 7168\n  accept_unconditional: [0.8, 0.56]\n")
    )
    assert parsed.campaign.accept_alphas == pytest.approx([0.8, 0.7])


def test_tau_above_its_bound_names_the_accept_length_line():
    """Issue 43, item 9: the error named draft_steps' line; the value above its bound is accept_length."""
    text = FILE.replace("  hidden_size: 7168\n", "  hidden_size: 7168\n  accept_length: 10\n  draft_steps: 3\n")
    line = text.splitlines().index("  accept_length: 10") + 1
    with pytest.raises(Invalid) as refused:
        parse_campaign_file(text)
    assert refused.value.message.startswith(f"line {line}: "), refused.value.message
    # The field named once, by where it is (it read "campaign.accept_length: accept_length: accept length ...").
    assert refused.value.message == (
        f"line {line}: campaign.accept_length: accept length 10 is above 4, the most 3 draft steps and the bonus "
        "token can give (tau <= k + 1)"
    )
