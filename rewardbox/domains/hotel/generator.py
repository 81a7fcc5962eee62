"""The hotel task generator: seeded templates -> a ThinkingBox-layout dataset.

Regenerate the checked-in dataset byte for byte with::

    python -m rewardbox.domains.hotel.generator --out rewardbox/domains/hotel/dataset

``generate_tasks(seed)`` returns the task specs as Python dicts (the oracle tests
use them directly); ``write_dataset(out, seed)`` writes ``agent/agent.yaml``,
``scenario/hotel.yaml``, ``test_case/hotel_*.py`` (THINKINGBOX_FORMAT.md §1.2:
module ``"!"`` defaults, one ``"!"`` YAML docstring per test function, plain helper
functions) and the ``testlists/benchmark.yaml`` / ``candidates.yaml`` split
(about one task in four of every template goes to the benchmark).
"""

from __future__ import annotations

import argparse
import random
import textwrap
from pathlib import Path
from typing import Any

import yaml

from rewardbox.domains.hotel.builder import WorldBuilder
from rewardbox.domains.hotel.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.hotel.templates import FAMILIES

DEFAULT_SEED = 20250910
SCENARIO = "hotel"

AGENT_INSTRUCTIONS = (
    "You are a company travel desk agent. Use the tools to look up facts and to make changes; never invent ids "
    "or values. Follow the policy in the next system message exactly.\n"
    "Every message you write is shown to the traveller. End your message with <DONE> only when the request is "
    "finished and you are not asking the traveller anything. If you ask a question, do not write <DONE>."
)


def generate_tasks(seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Every hotel task, in file order.

    Args:
        seed: the generator seed; each task draws from its own
            ``random.Random(f"{seed}:{template}:{k}")``, so tasks are independent.

    Returns:
        Dicts with ``uid, file, name, family, difficulty, query, user_context, init,
        world_state, tags, expects_write, response_values, split``; ``init`` is
        ``{"rewardbox_hotel": {"data_patch": ..., "golden_test_case": {"tool_interactions": [...]}}}``.
    """
    tasks: list[dict[str, Any]] = []
    index = 0
    for family in FAMILIES:
        for k in range(family.count):
            index += 1
            builder = WorldBuilder(index, random.Random(f"{seed}:{family.name}:{k}"))
            made = family.build(builder, k)
            name = f"test_{family.name}_{k + 1:02d}"
            init = {SERVER_NAME: {"data_patch": builder.rows,
                                  "golden_test_case": {"tool_interactions": made["golden"]}}}
            tags = [f"difficulty:{family.difficulty}", "expects_write" if made["expects_write"] else "no_write",
                    f"family:{family.name}"] + (["tells_value"] if made["response_values"] else [])
            tasks.append({
                "uid": f"{family.file}:{name}", "file": family.file, "name": name, "family": family.name,
                "difficulty": family.difficulty, "query": made["query"], "user_context": made["user_context"],
                "init": init, "world_state": init, "tags": tags, "expects_write": made["expects_write"],
                "response_values": made["response_values"], "split": "candidate",
            })
    rng = random.Random(f"{seed}:benchmark")
    for family in FAMILIES:
        members = [t for t in tasks if t["family"] == family.name]
        for task in rng.sample(members, max(1, round(len(members) / 4))):
            task["split"] = "benchmark"
    return tasks


# -- YAML rendering --------------------------------------------------------------------


class _Flow(dict):
    """A mapping written on one line (table rows, tool parameters)."""


class _FlowList(list):
    """A list written on one line (tags)."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def to_yaml(value: Any) -> str:
    """Deterministic YAML (insertion order, no aliases, literal blocks for multi-line text)."""
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096,
                     allow_unicode=False)


def _test_yaml(task: dict[str, Any]) -> dict[str, Any]:
    server = task["init"][SERVER_NAME]
    patch = {table: [_Flow(row) for row in rows] for table, rows in server["data_patch"].items()}
    golden = [_Flow(tool=i["tool"], parameters=_Flow(i["parameters"]))
              for i in server["golden_test_case"]["tool_interactions"]]
    return {"query": task["query"], "user_context": task["user_context"],
            "init": {SERVER_NAME: {"data_patch": patch, "golden_test_case": {"tool_interactions": golden}}},
            "tags": _FlowList(task["tags"])}


# -- files -----------------------------------------------------------------------------

_FILE_HEAD = '''\
# Generated by `python -m rewardbox.domains.hotel.generator --out rewardbox/domains/hotel/dataset`
# (seed {seed}). Do not edit by hand: change the templates and regenerate.
"""!
scenario: {scenario}
tags: [hotel]
"""

from thinkingbox.common import Judge, TestContext

SRV = "{server}"


def validate_database(x: TestContext) -> None:
    """The terminal state must equal the golden state (hash), else show the diff."""
    effects = x.effects[SRV]
    if effects.get("golden_error"):
        raise RuntimeError("invalid task, the golden state cannot be built: " + effects["golden_error"])
    lines = [
        f"{{d['path']}}: {{d['type']}} result={{d.get('result')!r}} golden={{d.get('golden')!r}}"
        for d in effects["diff"][:20]
    ]
    assert effects["result_db_hash"] == effects["golden_db_hash"], (
        "terminal state differs from the golden state: " + "; ".join(lines)
    )


def validate_response_contains(x: TestContext, *values: str) -> None:
    """The agent's last reply must contain one of ``values`` (case-insensitive)."""
    reply = (x.response or "").lower()
    assert any(v.lower() in reply for v in values), f"reply lacks any of {{list(values)!r}}: {{x.response!r}}"
'''


def render_test_function(task: dict[str, Any]) -> str:
    """One test function: ``"!"`` YAML docstring, then the checks."""
    body = to_yaml(_test_yaml(task))
    if "\\" in body or '"""' in body:
        raise ValueError(f"{task['uid']}: the YAML must not contain backslashes or triple quotes")
    checks = ["    validate_database(x)"]
    if task["response_values"]:
        checks.append(f"    validate_response_contains(x, {', '.join(repr(v) for v in task['response_values'])})")
    return (f"def {task['name']}(x: TestContext, judge: Judge):\n"
            f'    """!\n{textwrap.indent(body, "    ")}    """\n' + "\n".join(checks) + "\n")


def render_test_file(tasks: list[dict[str, Any]], seed: int) -> str:
    """A whole ``test_case/hotel_*.py`` file."""
    head = _FILE_HEAD.format(seed=seed, scenario=SCENARIO, server=SERVER_NAME)
    return head + "".join("\n\n" + render_test_function(t) for t in tasks)


def scenario_yaml() -> str:
    """``scenario/hotel.yaml``: world_state, the tool list, the policy."""
    tools = [fn.__name__ for fn in DOMAIN.tools]
    doc = {"world_state": {SERVER_NAME: {"data_patch": None, "golden_test_case": None}},
           "tools": [_Flow(name=name) for name in tools],
           "bot_instructions": DOMAIN.policy_text + "\n"}
    return to_yaml(doc)


def write_dataset(out: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write the whole dataset under ``out``; stale ``test_case/hotel_*.py`` files are removed.

    Returns:
        The paths written, sorted.
    """
    tasks = generate_tasks(seed)
    files: dict[Path, str] = {
        out / "agent" / "agent.yaml": to_yaml({"system_instructions": AGENT_INSTRUCTIONS + "\n"}),
        out / "scenario" / f"{SCENARIO}.yaml": scenario_yaml(),
        out / "testlists" / "benchmark.yaml": to_yaml([t["uid"] for t in tasks if t["split"] == "benchmark"]),
        out / "testlists" / "candidates.yaml": to_yaml([t["uid"] for t in tasks if t["split"] == "candidate"]),
    }
    for name in dict.fromkeys(t["file"] for t in tasks):
        files[out / "test_case" / name] = render_test_file([t for t in tasks if t["file"] == name], seed)
    stale = set((out / "test_case").glob("hotel_*.py")) - set(files)
    for path in stale:
        path.unlink()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
    return sorted(files)


def main(argv: list[str] | None = None) -> None:
    """CLI: ``--out DIR [--seed N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="dataset directory to (re)write")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    paths = write_dataset(args.out, args.seed)
    print(f"wrote {len(paths)} files, {len(generate_tasks(args.seed))} tasks under {args.out}")


if __name__ == "__main__":
    main()
