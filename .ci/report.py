#!/usr/bin/env python3
"""The time report `.ci/run` prints at its end, passed or failed: each step's seconds and
share of the run, the dev build that ran beside the setup, each test pass's count and time,
and the ten slowest tests of every nextest pass (from their JUnit reports).

Usage: report.py DIR, where DIR holds `started`, `ended` (epoch seconds), `steps` (a line
`EPOCH<TAB>NAME` as each step began), optionally `dev-build-times` (`START<TAB>END`) and
`junit-<pass>.xml` files.
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def minutes(seconds):
    return f"{seconds // 60:d}:{seconds % 60:02d}"


def steps_table(folder, started, ended):
    lines = (folder / "steps").read_text().splitlines() if (folder / "steps").exists() else []
    marks = [(int(t), name) for t, name in (line.split("\t", 1) for line in lines if "\t" in line)]
    print(f"\n== time report: {minutes(ended - started)} in all ({ended - started} s)")
    print(f"{'s':>6}  {'share':>5}  step")
    total = max(ended - started, 1)
    for i, (at, name) in enumerate(marks):
        until = marks[i + 1][0] if i + 1 < len(marks) else ended
        took = until - at
        print(f"{took:>6}  {100 * took / total:>4.0f}%  {name[:110]}")
    times = folder / "dev-build-times"
    if times.exists():
        begin, end = (int(x) for x in times.read_text().split())
        print(f"(the dev build took {end - begin} s beside the setup; its step above is the wait)")


def testcases(path):
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        cases.append((float(case.get("time") or 0), case.get("name") or "?", failed, skipped))
    return cases


def tests_tables(folder):
    for path in sorted(folder.glob("junit-*.xml")):
        name = path.stem.removeprefix("junit-")
        try:
            cases = testcases(path)
        except ET.ParseError as error:
            print(f"\n== tests, {name}: the JUnit report does not parse ({error})")
            continue
        ran = [c for c in cases if not c[3]]
        failed = sum(1 for c in ran if c[2])
        busy = sum(c[0] for c in ran)
        print(
            f"\n== tests, {name}: {len(ran)} ran, {failed} failed; "
            f"{busy:.0f} s of test time; the ten slowest:"
        )
        for took, test, bad, _ in sorted(ran, reverse=True)[:10]:
            print(f"{took:>8.1f} s  {test}{'  (FAILED)' if bad else ''}")
        # Where the pass's test time goes, by module (a test's name up to its last `::`).
        modules = {}
        for took, test, _, _ in ran:
            module = test.rsplit("::", 1)[0] if "::" in test else test
            count, seconds = modules.get(module, (0, 0.0))
            modules[module] = (count + 1, seconds + took)
        print(f"   by module ({len(modules)}), the fifteen longest: tests, test time, share")
        for module, (count, seconds) in sorted(modules.items(), key=lambda m: -m[1][1])[:15]:
            share = 100 * seconds / busy if busy else 0
            print(f"{seconds:>8.0f} s  {count:>4}  {share:>4.0f}%  {module}")


def main():
    folder = Path(sys.argv[1])
    started = int((folder / "started").read_text())
    ended = int((folder / "ended").read_text())
    tests_tables(folder)
    steps_table(folder, started, ended)


if __name__ == "__main__":
    main()
