"""Print where the latest reliability report is (``make demo`` calls this last)."""

from __future__ import annotations

from rewardbox.config.profile import profile_from_env
from rewardbox.strict_json import loads


def main() -> None:
    report = profile_from_env().artifacts_path / "report" / "reliability_report.md"
    if report.exists():
        verdict = report.parent / "verdict.json"
        if verdict.exists():  # the report's own verdict: interval and sign-flip test must agree
            print("\n" + "\n".join(loads(verdict.read_text())["lines"]))
        print(
            f"\nReport: {report}\nPlots:  {report.parent}/*.png\nUI:     make dev  (then open http://127.0.0.1:3000)"
        )
    else:
        raise SystemExit(f"no report at {report}: the run did not reach reliability_report")


if __name__ == "__main__":
    main()
