"""The `llmlab` command: doctor, course, make-labs."""

import argparse
import json
import sys
from pathlib import Path

from llmlab import env
from llmlab.course.labs import capability_table

SEVERITY_MARK = {"error": "ERROR", "warning": "WARNING", "info": "note"}


def _labs_section(report: env.EnvReport) -> str:
    lines = ["Labs on this machine", f"  {'lab':<42} {'scale':<10} why"]
    for lab, scale, why in capability_table(report):
        planned = "" if lab.ready else " (planned)"
        lines.append(f"  {lab.number:02d} {lab.title + planned:<39} {scale:<10} {why}")
    return "\n".join(lines)


def _problems_section(problems: list[env.Problem]) -> str:
    if not problems:
        return "Problems: none found"
    lines = ["Problems"]
    for problem in problems:
        lines.append(f"  {SEVERITY_MARK[problem.severity]}: {problem.message}")
        lines.append(f"    what to do: {problem.fix}")
    return "\n".join(lines)


def doctor(as_json: bool) -> int:
    """Print the machine report and the lab scales here; exit code 1 when the stack is broken."""
    report = env.collect()
    problems = env.diagnose(report)
    profile = "full" if report.gpus else "smoke"
    if as_json:
        payload = env.report_to_dict(report)
        payload["problems"] = [vars(problem) for problem in problems]
        payload["labs"] = [
            {"lab": lab.notebook, "ready": lab.ready, "scale": scale, "why": why}
            for lab, scale, why in capability_table(report)
        ]
        payload["recommended_profile"] = profile
        print(json.dumps(payload, indent=2))
    else:
        print(env.format_report(report))
        print()
        print(_labs_section(report))
        print()
        print(_problems_section(problems))
        print(f"\nRecommended profile: {profile} (LLMLAB_PROFILE=auto picks it)")
    return 1 if any(problem.severity == "error" for problem in problems) else 0


def course(profile_name: str, only: list[str], solutions: Path, out: Path) -> int:
    """Execute the solution notebooks headless and print lab, status, wall time, headline."""
    from llmlab.course.runner import format_table, run_course  # needs the notebook stack

    runs = run_course(solutions, out, profile_name, only or None)
    print()
    print(format_table(runs))
    return 0 if all(run.ok for run in runs) else 1


def make_labs(solutions: Path, labs: Path) -> int:
    from llmlab.course.generate import generate_labs

    for path in generate_labs(solutions, labs):
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p_doctor = commands.add_parser("doctor", help="check this machine and the course stack")
    p_doctor.add_argument("--json", action="store_true", help="print JSON (for issue reports)")

    p_course = commands.add_parser("course", help="run the solution notebooks headless")
    p_course.add_argument("--profile", default="auto", help="smoke, full or auto (default)")
    p_course.add_argument("--only", nargs="*", default=[], help="lab prefixes, e.g. 00 03")
    p_course.add_argument("--solutions", type=Path, default=Path("solutions"))
    p_course.add_argument("--out", type=Path, default=Path("build"))

    p_labs = commands.add_parser("make-labs", help="regenerate labs/ from solutions/")
    p_labs.add_argument("--solutions", type=Path, default=Path("solutions"))
    p_labs.add_argument("--labs", type=Path, default=Path("labs"))

    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor(args.json)
    if args.command == "course":
        return course(args.profile, args.only, args.solutions, args.out)
    return make_labs(args.solutions, args.labs)


if __name__ == "__main__":
    sys.exit(main())
