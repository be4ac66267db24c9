#!/usr/bin/env python3
"""Every release version an example names is the one being released: the crate's (Cargo.toml).

    check_versions.py REPO_ROOT

Looks in README.md, docs/, k8s/, charts/, image/ and the Dockerfile for the forms a reader copies:
an image reference (`meshdns/meshdns:X.Y.Z`), a kustomize `newTag: X.Y.Z`, a remote component's
`?ref=vX.Y.Z`, a chart's `--version X.Y.Z`, and the chart's own version and appVersion. A
version named as history ("0.1.0 accepted …", CHANGELOG.md, bench/results) is none of these
forms. Prints PASS/FAIL lines.
"""
import pathlib
import re
import sys

from checks import Checks

FORMS = [
    re.compile(r"meshdns/meshdns:v?(\d+\.\d+\.\d+)\b"),
    re.compile(r"^\s*newTag:\s*\"?v?(\d+\.\d+\.\d+)", re.M),
    re.compile(r"[?&]ref=v(\d+\.\d+\.\d+)\b"),
    re.compile(r"helm\b[^\n]*--version[ =]v?(\d+\.\d+\.\d+)\b"),
    re.compile(r"^(?:version|appVersion):\s*\"?(\d+\.\d+\.\d+)", re.M),
]
PLACES = ["README.md", "Dockerfile", "docs", "k8s", "charts", "image"]
SUFFIXES = {".md", ".yaml", ".yml", ".sh", ".txt", ".tpl", ".env", ""}


def files(root):
    for place in PLACES:
        path = root / place
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUFFIXES)


def main():
    root = pathlib.Path(sys.argv[1])
    checks = Checks("versions")
    version = re.search(r'^version = "([^"]+)"', (root / "Cargo.toml").read_text(), re.M).group(1)
    found, stale = 0, []
    for path in files(root):
        text = path.read_text(errors="replace")
        for form in FORMS:
            for m in form.finditer(text):
                found += 1
                if m.group(1) != version:
                    line = text.count("\n", 0, m.start()) + 1
                    stale.append(f"{path.relative_to(root)}:{line}: {m.group(0).strip()}")
    checks.check(f"every release version the examples name ({found}) is Cargo.toml's {version}",
                 found > 0 and not stale, "\n      ".join([""] + stale) if stale else "none found")
    return checks.exit_code()


if __name__ == "__main__":
    sys.exit(main())
