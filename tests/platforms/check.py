#!/usr/bin/env python3
"""Every platform's DNS change, as `meshdns dns-change` generates it, against that platform's stock
configuration (kept in tests/platforms/<platform>/, see README.md there).

    check.py            (inside a network namespace of its own: run.sh starts it with unshare -n)
    MESHDNS_BIN: the meshdns binary; COREDNS: the CoreDNS binary (v1.12.4)

Per platform:
- the committed artifact is what the binary generates now from meshdns.env and the stock file;
- every stock line is kept; applying the change twice gives what applying it once gives;
- a zone meshdns owns that the operator already serves is refused (exit 64, its place named);
- each of meshdns's zones (as `meshdns --check` routes them) goes to the resolver, 10.96.0.53;
- for the CoreDNS platforms (kubeadm, k3s, AKS, EKS, RKE2): the real CoreDNS loads the resulting
  configuration, still answers the stock zones, and sends meshdns's zones to a fake resolver.
What runs on loopback instead of a cluster is listed in STAND_INS; every address is in 127/8.
Prints PASS/FAIL lines; exits 1 on a failure.
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("MESHDNS_BIN", "target/debug/meshdns")
COREDNS = os.environ.get("COREDNS", "/opt/gotools/coredns")
ENV = os.path.join(HERE, "meshdns.env")
RESOLVER = "10.96.0.53"
# platform: (stock file, committed artifact, loaded by the real CoreDNS here)
PLATFORMS = {
    "kubeadm": ("Corefile", "Corefile.meshdns", True),
    "k3s": ("Corefile", "coredns-custom.yaml", True),
    "aks": ("Corefile", "coredns-custom.yaml", True),
    "rke2": ("Corefile", "helmchartconfig.yaml", True),
    "eks": ("Corefile", "configuration-values.json", True),
    "gke": ("stubDomains.json", "kube-dns.yaml", False),
    "openshift": ("servers.json", "dns-patch.json", False),
}
# Loopback stand-ins for what only a cluster has, and why (applied to the Corefile CoreDNS loads):
FAKE_RESOLVER = ("127.0.0.53", 5353)   # the cluster-level resolver's Service IP (10.96.0.53)
FAKE_UPSTREAM = ("127.0.0.54", 5353)   # the node's resolvers behind `forward . /etc/resolv.conf`
SERVICE_ADDR = "10.96.0.1"             # what the kubernetes stand-in answers for cluster.local
STAND_INS = [
    # the kubernetes plugin needs an API server: a template answers every A name of
    # cluster.local as a Service would (10.96.0.1), the rest falls through as before
    (re.compile(r"^(\s*)kubernetes\b[^\n]*\{\n.*?^\s*\}\n", re.M | re.S),
     "\\1template IN A cluster.local {\n\\1    answer \"{{ .Name }} 30 IN A %s\"\n\\1}\n" % SERVICE_ADDR),
    # the node's resolv.conf (outside the namespace): a fake upstream on loopback
    (re.compile(r"forward(\s+)\. /etc/resolv\.conf"), "forward\\1. %s:%d" % FAKE_UPSTREAM),
    # the resolver's Service IP: a fake resolver on loopback
    (re.compile(r"forward \. " + re.escape(RESOLVER) + r"\b"), "forward . %s:%d" % FAKE_RESOLVER),
]
FAILED = []


def check(what, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    if not ok:
        FAILED.append(what)
    return ok


def generate(platform, current=None, resolver=RESOLVER):
    """(exit code, stdout, stderr) of `meshdns dns-change`, `current` given as a file."""
    with tempfile.NamedTemporaryFile("w", suffix=".current") as f:
        cmd = [BIN, "dns-change", "--platform", platform, "--resolver", resolver, "--env-file", ENV]
        if current is not None:
            f.write(current)
            f.flush()
            cmd += ["--current", f.name]
        run = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=30)
    return run.returncode, run.stdout, run.stderr


def owned_zones():
    """The zones `meshdns --check` routes to clusters for meshdns.env."""
    run = subprocess.run([BIN, "--check", "--env-file", ENV], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"]}, timeout=30)
    if run.returncode:
        sys.exit(f"meshdns --check: {run.stderr}")
    return [z.rstrip(".") for z in re.findall(r"^\s+(\S+)\s+(?:cluster \S+|distributed|clusterset)\s", run.stdout, re.M)]


def blocks(corefile):
    """{zone: [forward lines]} of the server blocks at the top level of a Corefile."""
    found, depth, zones = {}, 0, []
    for raw in corefile.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if depth == 0 and line.endswith("{"):
            zones = [k.split("://")[-1].rsplit(":", 1)[0].rstrip(".").lower() or "." for k in line[:-1].split()]
            for z in zones:
                found.setdefault(z, [])
        elif depth == 1 and line.startswith("forward "):
            for z in zones:
                found[z].append(line)
        depth += line.count("{") - line.count("}")
    return found


def conflicting(platform, stock):
    """The stock configuration with the operator's own entry for cluster.b, and what names it."""
    if platform == "gke":
        return json.dumps({"corp.example": ["10.20.0.2"], "cluster.b": ["10.9.0.9"]}), 'stubDomains "cluster.b"'
    if platform == "openshift":
        return json.dumps([{"name": "theirs", "zones": ["cluster.b"]}]), 'spec.servers "theirs"'
    line = len(stock.splitlines()) + 1
    return stock + "cluster.b:53 {\n    forward . 10.9.0.1\n}\n", f"line {line}"


def applied(platform, stock, artifact):
    """What the platform runs after the change: (Corefile or setting, {file: text} beside it)."""
    if platform == "kubeadm":
        return artifact, {}
    if platform == "eks":
        return json.loads(artifact)["corefile"], {}
    if platform in ("k3s", "aks"):
        data = yaml.safe_load(artifact)["data"]
        return stock, {f"custom/{k}": v for k, v in data.items()}
    if platform == "rke2":
        values = yaml.safe_load(yaml.safe_load(artifact)["spec"]["valuesContent"])
        # The chart renders extraConfig at the top of the Corefile, then its servers (the stock).
        top = "".join(f"{k} {v['parameters']}\n" for k, v in values["extraConfig"].items())
        return top + stock, {z["filename"]: z["contents"] for z in values["zoneFiles"]}
    if platform == "gke":
        return yaml.safe_load(artifact)["data"]["stubDomains"], {}
    return json.dumps(json.loads(artifact)["spec"]["servers"]), {}


def routes(platform, config, files):
    """{zone: [where it goes]} in the applied configuration."""
    if platform == "gke":
        return {k: v for k, v in json.loads(config).items()}
    if platform == "openshift":
        out = {}
        for s in json.loads(config):
            for z in s.get("zones", []):
                out.setdefault(z, []).extend(s.get("forwardPlugin", {}).get("upstreams", []))
        return out
    found = blocks(config)
    for text in files.values():
        for z, fwd in blocks(text).items():
            found.setdefault(z, []).extend(fwd)
    return {z: [f.split()[-1] for f in fwd] for z, fwd in found.items()}


def check_platform(platform, zones):
    stock_name, artifact_name, _ = PLATFORMS[platform]
    stock = open(os.path.join(HERE, platform, stock_name)).read()
    committed = open(os.path.join(HERE, platform, artifact_name)).read()
    rc, artifact, err = generate(platform, stock)
    check(f"{platform}: {artifact_name} is what `meshdns dns-change` generates now", rc == 0 and artifact == committed,
          f"exit {rc} {err.strip()}; regenerate with tests/platforms/run.sh --write")
    config, files = applied(platform, stock, artifact)
    if platform in ("kubeadm", "eks"):
        check(f"{platform}: every stock line kept, in order, unchanged", config.startswith(stock), "stock changed")
    elif platform in ("k3s", "aks", "rke2"):
        obj = yaml.safe_load(artifact)
        values = yaml.safe_load(obj.get("spec", {}).get("valuesContent", "{}"))
        check(f"{platform}: the stock Corefile is kept whole: one object of its own ({obj['kind']} "
              f"{obj['metadata']['name']}) adds {sorted(files)}, the chart's servers untouched",
              (obj["kind"], obj["metadata"]["name"]) in (("ConfigMap", "coredns-custom"), ("HelmChartConfig", "rke2-coredns"))
              and "servers" not in values and bool(files), artifact[:300])
    else:
        before = json.loads(stock)
        after = json.loads(config)
        kept = all(item in after for item in before) if isinstance(before, list) else \
            all(after.get(k) == v for k, v in before.items())
        check(f"{platform}: every stock entry kept", kept, f"{before} -> {after}")
    again_current = {"kubeadm": artifact, "eks": config, "gke": config, "openshift": config}.get(platform, stock)
    rc2, again, err2 = generate(platform, again_current)
    check(f"{platform}: applying the change twice gives what applying it once gives", rc2 == 0 and again == artifact,
          f"exit {rc2} {err2.strip()}")
    bad, place = conflicting(platform, stock)
    rc3, out3, err3 = generate(platform, bad)
    check(f"{platform}: a zone meshdns owns that the operator serves is refused (exit 64, {place} named)",
          rc3 == 64 and not out3 and place in err3 and "cluster.b" in err3, f"exit {rc3}: {err3.strip()}")
    got = routes(platform, config, files)
    wrong = {z: got.get(z) for z in zones if got.get(z) != [RESOLVER]}
    check(f"{platform}: each of meshdns's zones {zones} goes to the resolver {RESOLVER} only", not wrong, str(wrong))
    return config, files


# -- the real CoreDNS ---------------------------------------------------------------------

def name_wire(name):
    return b"".join(bytes([len(p)]) + p.encode() for p in name.strip(".").split(".") if p) + b"\0"


def skip_name(msg, at):
    while msg[at]:
        if msg[at] & 0xC0 == 0xC0:
            return at + 2
        at += msg[at] + 1
    return at + 1


def ask(name, server=("127.0.0.1", 53)):
    """(rcode, [A addresses]) of an A query, or (None, []) on timeout."""
    query = struct.pack(">HHHHHH", 0x4D44, 0x0100, 1, 0, 0, 0) + name_wire(name) + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(query, server)
        try:
            msg = s.recv(4096)
        except socket.timeout:
            return None, []
    count = struct.unpack(">H", msg[6:8])[0]
    at = skip_name(msg, 12) + 4
    addrs = []
    for _ in range(count):
        at = skip_name(msg, at)
        rtype, _, _, length = struct.unpack(">HHIH", msg[at:at + 10])
        at += 10
        if rtype == 1:
            addrs.append(socket.inet_ntoa(msg[at:at + 4]))
        at += length
    return msg[3] & 0xF, addrs


def fake_dns(addr, answer):
    """A UDP DNS server answering every A question with `answer` (others: no data)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(addr)

    def serve():
        while True:
            msg, peer = sock.recvfrom(4096)
            end = skip_name(msg, 12) + 4
            qtype = struct.unpack(">H", msg[end - 4:end - 2])[0]
            rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton(answer) if qtype == 1 else b""
            head = msg[:2] + struct.pack(">HHHHH", 0x8180, 1, 1 if rr else 0, 0, 0)
            sock.sendto(head + msg[12:end] + rr, peer)

    threading.Thread(target=serve, daemon=True).start()


def stand_in(text, root):
    for pattern, replacement in STAND_INS:
        text = pattern.sub(replacement, text)
    return text.replace("/etc/coredns/", root + "/")


def check_coredns(platform, config, files, zones):
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                f.write(stand_in(text, root))
        with open(os.path.join(root, "NodeHosts"), "w") as f:
            f.write("127.0.0.9 node-1\n")
        with open(os.path.join(root, "Corefile"), "w") as f:
            f.write(stand_in(config, root))
        log = open(os.path.join(root, "coredns.log"), "w+")
        server = subprocess.Popen([COREDNS, "-conf", os.path.join(root, "Corefile")], cwd=root, stdout=log, stderr=log)
        try:
            deadline = time.time() + 15
            while time.time() < deadline and ask("kubernetes.default.svc.cluster.local")[0] is None \
                    and server.poll() is None:
                time.sleep(0.2)
            log.seek(0)
            if not check(f"{platform}: the real CoreDNS loads the resulting configuration",
                         server.poll() is None and ask("kubernetes.default.svc.cluster.local")[0] == 0, log.read()[-1500:]):
                return
            check(f"{platform}: CoreDNS still answers the stock zone (cluster.local, kubernetes stand-in)",
                  ask("kubernetes.default.svc.cluster.local") == (0, [SERVICE_ADDR]), str(ask("kubernetes.default.svc.cluster.local")))
            check(f"{platform}: CoreDNS still forwards other names upstream (`forward . /etc/resolv.conf`)",
                  ask("www.example.com") == (0, ["192.0.2.54"]), str(ask("www.example.com")))
            for zone in zones:
                got = ask(f"db-0.db.ns.{zone}")
                check(f"{platform}: CoreDNS sends {zone} to the resolver", got == (0, ["192.0.2.53"]), str(got))
        finally:
            server.terminate()
            server.wait(timeout=10)


def write_artifacts():
    for platform, (stock_name, artifact_name, _) in PLATFORMS.items():
        rc, out, err = generate(platform, open(os.path.join(HERE, platform, stock_name)).read())
        if rc:
            sys.exit(f"{platform}: {err}")
        with open(os.path.join(HERE, platform, artifact_name), "w") as f:
            f.write(out)
    rc, out, err = generate("gke-autopilot")
    with open(os.path.join(HERE, "gke-autopilot", "refusal.txt"), "w") as f:
        f.write(err)


def main():
    if sys.argv[1:] == ["--write"]:
        write_artifacts()
        return 0
    zones = owned_zones()
    check(f"meshdns.env gives the zones of every kind: {zones}",
          zones == ["cluster.a", "cluster.b", "distributed.local", "clusterset.local"], str(zones))
    fake_dns(FAKE_RESOLVER, "192.0.2.53")
    fake_dns(FAKE_UPSTREAM, "192.0.2.54")
    for platform, (_, _, real) in PLATFORMS.items():
        config, files = check_platform(platform, zones)
        if real:
            check_coredns(platform, config, files, zones)
    rc, out, err = generate("gke-autopilot")
    committed = open(os.path.join(HERE, "gke-autopilot", "refusal.txt")).read()
    check("gke-autopilot: refused (exit 64) with the sidecar said plainly, as committed in refusal.txt",
          rc == 64 and not out and "sidecar" in err and err == committed, f"exit {rc}: {err.strip()}")
    print(f"{len(FAILED)} failed" if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
