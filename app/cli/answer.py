"""The campaign's answer: `campaign answer` and `answer-config`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.common import fail, get_settings, migrated_engine, session_scope

if TYPE_CHECKING:
    from app.domain.answer.grid import SpeculationAnswer


def answer_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="The answer as GET /api/campaigns/SLUG/answer gives it.")
    ] = False,
    conditions: Annotated[
        str | None, typer.Option(help="The condition set (its key, as the answer lists them); default: the named one.")
    ] = None,
    context: Annotated[int | None, typer.Option(help="The condition set at this context length.")] = None,
    mode: Annotated[str | None, typer.Option(help="The condition set in this mode (graph | eager).")] = None,
    experts_dtype: Annotated[
        str | None, typer.Option(help="The condition set with these experts (bf16 | fp8 | int4); default bf16.")
    ] = None,
    draft_vocab: Annotated[
        int | None, typer.Option(help="The condition set whose draft step has this vocabulary; default 32000.")
    ] = None,
) -> None:
    """Up to which batch speculation pays, with how many draft tokens and which allreduce (intervals at the
    campaign's confidence), under one condition set."""
    import json

    from app.domain import campaigns
    from app.domain.answer.query import AnswerQuery
    from app.domain.answer.read import answer_document, pick_conditions, read_answer
    from app.domain.errors import DomainError

    with session_scope(migrated_engine(get_settings()), write=False, snapshot=True) as session:
        try:
            campaign = campaigns.get_campaign(session, slug)
            asked = pick_conditions(
                session,
                campaign,
                conditions,
                context=context,
                mode=mode,
                experts_dtype=experts_dtype,
                draft_vocab=draft_vocab,
            )
            answer = read_answer(session, campaign, AnswerQuery(asked))
        except DomainError as exc:
            fail(exc.message)
    found = answer.speculation
    if as_json:
        print(json.dumps(answer_document(answer), indent=2))
        return
    print(found.sentence)
    if answer.conditions is not None:
        default = " (the default)" if answer.is_default else f" (the default is {answer.default_label})"
        print(f"  under {answer.conditions.label}{default}")
        if answer.draft_vocab_note:
            print(f"  {answer.draft_vocab_note}")
        for c in answer.condition_sets if len(answer.condition_sets) > 1 else ():
            print(f"  also held: --conditions '{c.key}' ({c.label})")
    for a in found.approaches:
        b_star = a.break_even_batch if a.break_even_batch is not None else "-"
        schedule = ", ".join(f"b{b}:k{k}" for b, k in sorted(a.best_draft_tokens.items())) or "no speedup known"
        print(f"  {a.key}: break-even batch {b_star}; best draft tokens {schedule}")
    for line in tier_lines(found):
        print(f"  {line}")
    for m in found.missing:
        print(f"  missing: {m.what}" + (f" ({m.approach})" if m.approach else "") + f": {m.how}")
    for flag in answer.flags:
        print(f"  contradictory: {flag}")


def answer_config_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    engine: Annotated[str, typer.Option(help="sglang, vllm or trtllm.")] = "sglang",
    serve_batches: Annotated[
        str | None, typer.Option(help="The batch range you serve, e.g. 1-32 (the default): SGLang's one-k line.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="As GET /api/campaigns/SLUG/answer/config gives it.")] = False,
) -> None:
    """The launch settings that deploy the answer on one engine, each naming the measurement it comes from."""
    import json

    from app.domain import campaigns
    from app.domain.answer.configs import config_json, deploy_target, engine_config, parse_serve_range
    from app.domain.answer.read import read_answer
    from app.domain.errors import DomainError

    with session_scope(migrated_engine(get_settings()), write=False, snapshot=True) as session:
        try:
            serve = parse_serve_range(serve_batches)
            answer = read_answer(session, campaigns.get_campaign(session, slug))
            found, rows = answer.speculation, answer.approaches
            config = engine_config(engine, found, rows, serve=serve, target=deploy_target(session, found, rows))
        except DomainError as exc:
            fail(exc.message)
    if as_json:
        print(json.dumps(config_json(config), indent=2))
        return
    if config.env:
        print(f"export {config.env_shell}")
    if config.launch is not None:  # the whole command, its files written first: the Deploy panel's text
        print(config.launch.shell, end="")
        print(f"# {config.launch.model.source}; {config.launch.draft.source}")
    else:
        print(config.shell)
        for f in config.files:
            print(f"\n# {f.name}\n{f.content}", end="")
    for s in config.settings:
        print(f"# {s.option} = {s.value}: {s.source}")
    if config.static is not None:
        print(f"# without adaptive speculation, one k for batches {config.static.serve}: {config.static.shell}")
    for note in config.notes:
        print(f"# {note}")
    if config.rules:
        print(f"# rules: {config.rules}")
    for d in config.deviations:
        print(f"# differs from the answer: {d.text}")


def answer_check_cmd(
    slug: Annotated[str, typer.Argument(help="The campaign's slug.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="As GET /api/campaigns/SLUG/answer/engine-check gives it.")
    ] = False,
) -> None:
    """The answer checked against a real engine: each (batch, draft tokens) cell a vllm_server trial measured, its
    measured speedup beside the predictions (engine's counting, stand-in, stand-in + engine overhead), each held
    or missed by x%."""
    import json

    from app.domain import campaigns
    from app.domain.answer import AnswerQuery
    from app.domain.answer.prediction import check_document, check_lines
    from app.domain.answer.read import read_answer
    from app.domain.errors import DomainError

    with session_scope(migrated_engine(get_settings()), write=False, snapshot=True) as session:
        try:
            check = read_answer(session, campaigns.get_campaign(session, slug), AnswerQuery()).engine_check
        except DomainError as exc:
            fail(exc.message)
    assert check is not None  # read_answer always checks
    if as_json:
        print(json.dumps(check_document(check), indent=2))
        return
    print("\n".join(check_lines(check)))


def tier_lines(found: SpeculationAnswer) -> list[str]:
    """One line per unranked tier member, with the comparisons' label against its leader (issue 34's words,
    the campaign's minimum effect and confidence), as the page says it."""
    rule = f"{found.min_effect:.0%} at {found.confidence:.0%} confidence"
    lines = []
    for tier in found.tiers:
        for key in tier[1:]:
            v = found.tier_verdicts[key]
            interval = f" [{v.low:.3f}, {v.high:.3f}]" if v.low is not None and v.high is not None else ""
            lines.append(
                f"not ranked: {key} against {v.leader}: {v.words} by the minimum effect ({rule}), "
                f"ratio {v.ratio:.3f}{interval}"
            )
    return lines
