"""`campaign`: one command with subcommands (serve, demo, import, export, login-url, token, ...), in groups:
board (serve, demo, login-url), users (users, token, sessions), runners (runners, runner, preflight), notify,
campaigns (export, import, plan, rename, archive, restore, delete, settles, history, search), answer (answer,
answer-config, answer-check), replay, trials (trials, classify); common holds what they share.

Each subcommand imports what it runs, inside its function (tests/test_import_graph.py allows it for these
files): `campaign runner` on a GPU node and `campaign --help` start without the web app, the database layer
or plotly.
"""

from __future__ import annotations

import typer

from app.cli import answer, board, campaigns, notify, replay, runners, trials, users

cli = typer.Typer(
    help="Campaign Board: optimization campaigns for LLM inference on GPU nodes.",
    no_args_is_help=True,
    add_completion=False,
)
# The commands and groups, in the order `campaign --help` lists them.
cli.command()(board.serve)
cli.command()(board.demo)
cli.command("login-url")(board.login_url)
cli.command("export")(campaigns.export_cmd)
cli.command("answer")(answer.answer_cmd)
cli.command("answer-config")(answer.answer_config_cmd)
cli.command("answer-check")(answer.answer_check_cmd)
cli.command("plan")(campaigns.plan_cmd)
cli.command("settles")(campaigns.settles_cmd)
cli.command("history")(campaigns.history_cmd)
cli.command("search")(campaigns.search_cmd)
cli.command("import")(campaigns.import_cmd)
cli.command("rename")(campaigns.rename_cmd)
cli.command("archive")(campaigns.archive_cmd)
cli.command("restore")(campaigns.restore_cmd)
cli.command("delete")(campaigns.delete_cmd)
cli.command("trials")(trials.trials_cmd)
cli.command()(trials.classify)
cli.command()(runners.preflight)
cli.command("runner")(runners.runner)
cli.add_typer(users.token_cli, name="token")
cli.add_typer(users.sessions_cli, name="sessions")
cli.add_typer(users.users_cli, name="users")
cli.add_typer(runners.runners_cli, name="runners")
cli.add_typer(notify.notify_cli, name="notify")
cli.add_typer(replay.replay_cli, name="replay")


def main() -> None:
    cli()
