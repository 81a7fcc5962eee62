"""``python -m rewardbox.envserver``: serve tasks over OpenEnv's protocol (see ``docs/environment_server.md``)."""

from __future__ import annotations

import argparse
import sys

from rewardbox.episode.config import EpisodeConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = EpisodeConfig()
    parser = argparse.ArgumentParser(prog="python -m rewardbox.envserver", description=__doc__)
    parser.add_argument(
        "--domain",
        action="append",
        default=[],
        help="embedded domain to serve (retail, hotel, helpdesk); repeatable",
    )
    parser.add_argument(
        "--dataset",
        action="append",
        default=[],
        help="ThinkingBox dataset directory to serve; repeatable",
    )
    parser.add_argument(
        "--profile",
        default="demo",
        help="profile (name or YAML) for the sandbox, user simulator and grading sections, and the "
        "tasks when no --domain/--dataset is given (default: demo)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--max-sessions", type=int, default=16, help="concurrent episodes (WebSocket sessions)"
    )
    parser.add_argument(
        "--session-timeout-s",
        type=float,
        default=None,
        help="end sessions idle this long (seconds); default: never",
    )
    parser.add_argument("--max-user-turns", type=int, default=defaults.max_user_turns)
    parser.add_argument("--max-agent-turns", type=int, default=defaults.max_agent_turns)
    parser.add_argument(
        "--max-steps-per-user-turn", type=int, default=defaults.max_agent_steps_per_user_turn
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Load the tasks, build the shared services and serve until interrupted."""
    import uvicorn

    from rewardbox.envserver.app import build_app
    from rewardbox.envserver.services import build_services
    from rewardbox.runtime.verl_services import server_parts

    args = parse_args(argv)
    limits = {
        "max_user_turns": args.max_user_turns,
        "max_agent_turns": args.max_agent_turns,
        "max_agent_steps_per_user_turn": args.max_steps_per_user_turn,
    }
    tasks, parts = server_parts(
        args.profile, args.domain, args.dataset, limits
    )  # a bad limit fails before serving
    services = build_services(tasks, parts)
    print(
        f"serving {len(tasks)} tasks on http://{args.host}:{args.port} (WebSocket /ws, GET /tasks)",
        flush=True,
    )
    uvicorn.run(
        build_app(services, args.max_sessions, args.session_timeout_s),
        host=args.host,
        port=args.port,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
