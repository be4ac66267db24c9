#!/usr/bin/env python3
"""Runs every command block of docs/walkthrough.md that can run offline.

Usage: run_walkthrough.py REPO_ROOT  (MESHDNS_BIN: a built meshdns binary; kubectl on PATH)

Each fenced `sh` block is one of:
- an env-file excerpt (only MESHDNS_*=... lines, as a ConfigMap's env file holds them): checked
  with `meshdns --check --env-file` over the example's own env files, as the sidecar would read
  it (a transport=tls excerpt gets the CA the walkthrough's openssl block makes);
- an offline command block: every command is `target/release/meshdns`, `kubectl kustomize`
  or `openssl`. It runs with bash -euo pipefail in a
  scratch directory that sees the repository's k8s/ and the binary as target/release/meshdns. A block that runs `meshdns --check` is also run
  against a copy of k8s/ whose last cluster entry is made invalid, and must fail there: a
  pre-check that does not read every cluster (`env $(grep … | tr …)` cut MESHDNS_CLUSTERS at its
  first space) cannot pass;
- anything else needs a cluster or the network (kubectl --context, dig, docker, …): listed as
  skipped.
Everything runs in a network namespace of its own (`unshare --net`, no interface up): the
example's upstreams (10.96.0.10) and host-name endpoints are never asked, whatever a block says.
Prints one PASS/FAIL line per block checked, exits 1 on any failure.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

OFFLINE = ("target/release/meshdns", "kubectl kustomize", "openssl")
ENV_LINE = re.compile(r"^MESHDNS_[A-Z_]+=")
EXAMPLE_ENV = ["k8s/base/clusters.env", "k8s/clusters/a/local.env"]

CHECKS = Checks("walkthrough")
scratch_dirs = []


def blocks(text):
    """(line number, dedented body) of every ```sh block."""
    found = []
    for match in re.finditer(r"^( *)```sh\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(2).splitlines())
        found.append((text[: match.start()].count("\n") + 1, body))
    return found


def commands(body):
    """The commands of a block: continuation lines joined, comments and blanks dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def scratch(root, binary, k8s):
    """A directory where the walkthrough's relative paths work: k8s/ and target/release/meshdns."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="meshdns-walkthrough-"))
    scratch_dirs.append(work)
    (work / "k8s").symlink_to(k8s)
    (work / "target/release").mkdir(parents=True)
    (work / "target/release/meshdns").symlink_to(binary)
    return work


def offline(args, cwd=None):
    """`args` run in a network namespace without any interface up: no packet leaves it."""
    return subprocess.run(["unshare", "--net", "--"] + args, cwd=cwd, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]}, timeout=120)


def run(body, cwd):
    return offline(["bash", "-euo", "pipefail", "-c", body], cwd)


def broken_k8s(root):
    """A copy of k8s/ whose last MESHDNS_CLUSTERS entry uses transport=tls without any CA."""
    parent = pathlib.Path(tempfile.mkdtemp(prefix="meshdns-walkthrough-bad-"))
    scratch_dirs.append(parent)
    copy = parent / "k8s"
    shutil.copytree(root / "k8s", copy)
    env = copy / "base/clusters.env"
    text = re.sub(r"^(MESHDNS_CLUSTERS=.*)$", r"\1 transport=tls tls_name=dns.last.example", env.read_text(),
                  flags=re.M)
    env.write_text(text)
    return copy


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    binary = os.environ.get("MESHDNS_BIN")
    if not binary:
        CHECKS.check("a meshdns binary to run the blocks with (MESHDNS_BIN)", False, "none built")
        return 1
    text = (root / "docs/walkthrough.md").read_text()
    work = scratch(root, binary, root / "k8s")
    bad = scratch(root, binary, broken_k8s(root))
    ca = None
    ran = skipped = 0
    for line, body in blocks(text):
        cmds = commands(body)
        if not cmds:
            continue
        name = f"docs/walkthrough.md:{line} {cmds[0][:70]}"
        if all(ENV_LINE.match(c) for c in cmds):
            extra = work / f"excerpt-{line}.env"
            lines = list(cmds)
            if "transport=tls" in body:
                if ca is None:
                    CHECKS.check(name, False, "a transport=tls excerpt before the openssl block that makes the CA")
                    continue
                lines.append(f"MESHDNS_TLS_CA_FILE={ca}")
            extra.write_text("\n".join(lines) + "\n")
            args = [binary, "--check"] + [a for f in EXAMPLE_ENV for a in ("--env-file", str(root / f))]
            result = offline(args + ["--env-file", str(extra)])
            CHECKS.check(f"{name} (env excerpt, meshdns --check)", result.returncode == 0, result.stderr.strip())
            ran += 1
        elif all(c.startswith(OFFLINE) for c in cmds):
            result = run(body, work)
            CHECKS.check(name, result.returncode == 0, (result.stderr or result.stdout).strip()[-600:])
            ran += 1
            if (work / "ca.crt").exists():
                ca = work / "ca.crt"
            if "meshdns --check" in body:
                caught = run(body, bad)
                CHECKS.check(f"{name} catches a bad last cluster", caught.returncode != 0 and "MESHDNS_TLS_CA_FILE" in caught.stderr,
                       f"exit {caught.returncode}: {caught.stderr.strip()}")
        else:
            print(f"    skipped (needs a cluster or the network): docs/walkthrough.md:{line} {cmds[0][:70]}")
            skipped += 1
    CHECKS.check(f"ran {ran} offline blocks ({skipped} need a cluster)", ran >= 5, "fewer than 5 offline blocks found")
    return CHECKS.exit_code()


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for d in scratch_dirs:
            shutil.rmtree(d, ignore_errors=True)
