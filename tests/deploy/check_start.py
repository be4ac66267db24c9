#!/usr/bin/env python3
"""Starts every rendered meshdns container as its pod would run it (docs/design.md, "Deployment").

Usage: check_start.py RENDERED.yaml LABEL --image REF   (MESHDNS_BIN: a built meshdns binary; root)

For each workload of the render with a meshdns container (sidecar or cluster-level resolver):
- its image is exactly REF, the release reference of k8s/components/image;
- the kubelet could assemble it: every environment variable (values; downward API fields filled
  with example values; configMapKeyRef and secretKeyRef resolved from the render) and every
  volume it mounts (ConfigMaps of the render as files in the kubelet's layout, `..data` symlink
  included; Secrets of the render, or PEM files this check generates with openssl for the
  Secret a rendered cert-manager Certificate issues, with its key algorithm and encoding;
  emptyDirs), file modes and fsGroup as the kubelet sets them. A missing ConfigMap or Secret is
  what the pod would be stuck on, and fails;
- in a mount and network namespace of its own (unshare -m -n): a root file system with the
  binary at /meshdns (the image's entrypoint) and the kubelet's /etc/hosts, /etc/resolv.conf and
  /etc/hostname, read-only when readOnlyRootFilesystem says so, every volume bind-mounted at its
  mountPath; the pod's sysctls set in the network namespace (whose own default for
  net.ipv4.ip_unprivileged_port_start is 1024), loopback up with the pod IP on it; then,
  as the container's uid and gid (chroot --userspec, no new privileges, no capabilities):
  `meshdns --check` must exit 0 (and, for a pod with the downward API identity and a headless
  Service, route the pod's own name to itself), and meshdns itself must start -- every DNS listener bound
  (MESHDNS_LISTEN, so port 53 under that uid and sysctl) and the startupProbe's GET answered 200
  on the pod IP within the probe's budget -- and exit 0 on SIGTERM within the pod's grace period.
Nothing leaves the network namespace: it has no route out.

Prints one `PASS <label>: <check>` or `FAIL <label>: <check> -- <why>` line per check; exits 1
if any check failed. validate.sh counts the lines.
"""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from checks import Checks

import yaml

IMAGE_USER = 65532            # the Dockerfile's USER: a container without runAsUser runs as it
ENTRYPOINT = ["/meshdns"]     # the Dockerfile's ENTRYPOINT
POD_IP = "10.1.0.17"          # example values of the downward API
NODE_IP = "10.8.0.1"
NODE_RESOLVER = "10.8.0.254"
KUBE_DNS = "10.96.0.10"
FIELDS = {
    "status.podIP": POD_IP,
    "status.podIPs": POD_IP,
    "status.hostIP": NODE_IP,
    "status.hostIPs": NODE_IP,
    "spec.nodeName": "node-1",
    "spec.serviceAccountName": "default",
    "metadata.uid": "0f3c2a4e-5b6d-4e7f-8a9b-0c1d2e3f4a5b",
}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
DEVICES = ("null", "zero", "urandom", "random")

CHECKS = Checks()


class Unstartable(Exception):
    """What the kubelet would report instead of starting the container."""


def is_meshdns(container):
    name = container.get("image", "").rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return container.get("name") == "meshdns" or name == "meshdns"


class Render:
    """The objects of one rendered kustomization the kubelet would look up."""

    def __init__(self, docs):
        self.configmaps = {}
        self.secrets = {}
        self.certificates = {}
        for d in docs:
            key = (d["metadata"].get("namespace"), d["metadata"]["name"])
            if d["kind"] == "ConfigMap":
                self.configmaps[key] = {k: v.encode() for k, v in (d.get("data") or {}).items()}
                self.configmaps[key].update({k: base64.b64decode(v) for k, v in (d.get("binaryData") or {}).items()})
            elif d["kind"] == "Secret":
                data = {k: base64.b64decode(v) for k, v in (d.get("data") or {}).items()}
                data.update({k: v.encode() for k, v in (d.get("stringData") or {}).items()})
                self.secrets[key] = data
            elif d["kind"] == "Certificate":
                self.certificates[(key[0], d["spec"]["secretName"])] = d["spec"]
        self.issued = {}

    def configmap(self, ns, name, optional=False):
        if (ns, name) in self.configmaps:
            return self.configmaps[(ns, name)]
        if optional:
            return {}
        raise Unstartable(f'configmap "{name}" not found in namespace {ns}')

    def secret(self, ns, name, pki, optional=False):
        if (ns, name) in self.secrets:
            return self.secrets[(ns, name)]
        if (ns, name) in self.certificates:
            if (ns, name) not in self.issued:
                self.issued[(ns, name)] = pki.issue(self.certificates[(ns, name)])
            return self.issued[(ns, name)]
        if optional:
            return {}
        raise Unstartable(f'secret "{name}" not found in namespace {ns} (no Secret or Certificate rendered)')


class Pki:
    """A CA and the certificates cert-manager would issue, made with openssl."""

    def __init__(self, work):
        self.work = work
        self.n = 0
        self.ca_key, self.ca_crt = os.path.join(work, "ca.key"), os.path.join(work, "ca.crt")
        self.openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-days", "30", "-subj", "/CN=check_start mesh CA", "-keyout", self.ca_key, "-out", self.ca_crt,
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def openssl(self, *args):
        run = subprocess.run(["openssl", *args], capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"openssl {' '.join(args[:2])}: {run.stderr.strip()}")

    def key(self, spec, path):
        pk = spec.get("privateKey") or {}
        algorithm, size = pk.get("algorithm", "RSA"), pk.get("size")
        raw = path + ".raw"
        if algorithm == "ECDSA":
            curve = {256: "P-256", 384: "P-384", 521: "P-521"}[size or 256]
            self.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", f"ec_paramgen_curve:{curve}", "-out", raw)
        elif algorithm == "Ed25519":
            self.openssl("genpkey", "-algorithm", "ED25519", "-out", raw)
        else:
            self.openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", f"rsa_keygen_bits:{size or 2048}", "-out", raw)
        # cert-manager's default encoding is PKCS1: "EC PRIVATE KEY" / "RSA PRIVATE KEY".
        if pk.get("encoding", "PKCS1") == "PKCS1" and algorithm != "Ed25519":
            self.openssl("ec" if algorithm == "ECDSA" else "rsa", "-in", raw, "-out", path,
                         *([] if algorithm == "ECDSA" else ["-traditional"]))
        else:
            shutil.copy(raw, path)

    def issue(self, spec):
        self.n += 1
        base = os.path.join(self.work, f"leaf{self.n}")
        self.key(spec, base + ".key")
        usages = set(spec.get("usages") or ["digital signature", "key encipherment"])
        eku = [u for k, u in (("client auth", "clientAuth"), ("server auth", "serverAuth")) if k in usages]
        ext = ["basicConstraints=critical,CA:FALSE"]
        if eku:
            ext.append("extendedKeyUsage=" + ",".join(eku))
        if spec.get("dnsNames"):
            ext.append("subjectAltName=" + ",".join(f"DNS:{n}" for n in spec["dnsNames"]))
        with open(base + ".ext", "w") as f:
            f.write("\n".join(ext) + "\n")
        self.openssl("req", "-new", "-key", base + ".key", "-subj", f"/CN={spec.get('commonName', 'meshdns')}",
                     "-out", base + ".csr")
        self.openssl("x509", "-req", "-in", base + ".csr", "-CA", self.ca_crt, "-CAkey", self.ca_key,
                     "-CAcreateserial", "-days", "30", "-extfile", base + ".ext", "-out", base + ".crt")
        read = lambda p: open(p, "rb").read()  # noqa: E731
        return {"ca.crt": read(self.ca_crt), "tls.crt": read(base + ".crt"), "tls.key": read(base + ".key")}


def write_volume(path, files, mode, gid):
    """Files as the kubelet's atomic writer lays them out: ..data -> timestamped dir, KEY -> ..data/KEY."""
    stamp = "..2026_01_01_00_00_00.000000001"
    os.makedirs(os.path.join(path, stamp), exist_ok=True)
    for rel, (content, file_mode) in files.items():
        target = os.path.join(path, stamp, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(content)
        os.chmod(target, file_mode if file_mode is not None else mode)
        if gid is not None:
            os.chown(target, 0, gid)
        top = rel.split("/", 1)[0]
        if not os.path.lexists(os.path.join(path, top)):
            os.symlink(os.path.join("..data", top), os.path.join(path, top))
    os.symlink(stamp, os.path.join(path, "..data"))
    os.chmod(path, 0o755)


def project(data, items, source):
    """KEY -> (content, mode) for a volume source, honouring `items`."""
    if not items:
        return {k: (v, None) for k, v in data.items()}
    out = {}
    for it in items:
        if it["key"] not in data:
            raise Unstartable(f"{source}: key {it['key']!r} not found")
        out[it["path"]] = (data[it["key"]], it.get("mode"))
    return out


def field_value(path, meta):
    """A downward API field of the pod whose metadata is META (other fields: example values)."""
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    if path == "metadata.name":
        return meta["name"]
    if path == "metadata.namespace":
        return meta["namespace"]
    if path in FIELDS:
        return FIELDS[path]
    raise Unstartable(f"unsupported downward API field {path!r}")


def quantity(value):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9, "m": 1e-3}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    return float(m.group(1)) * units.get(m.group(2), 1)


class Pod:
    """One pod of a workload, and what the kubelet makes of one of its containers."""

    def __init__(self, workload, render, pki):
        self.render = render
        self.pki = pki
        self.ns = workload["metadata"].get("namespace") or "default"
        self.spec = workload["spec"]["template"]["spec"]
        name = workload["metadata"]["name"]
        self.name = f"{name}-0" if workload["kind"] == "StatefulSet" else f"{name}-5d8f7c9b4-x2x7q"
        labels = dict(workload["spec"]["template"].get("metadata", {}).get("labels") or {})
        self.meta = {"name": self.name, "namespace": self.ns, "labels": labels,
                     "annotations": workload["spec"]["template"].get("metadata", {}).get("annotations") or {}}
        self.volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        self.psc = self.spec.get("securityContext") or {}
        self.hostname = self.spec.get("hostname") or self.name
        self.subdomain = self.spec.get("subdomain") or (workload["spec"].get("serviceName")
                                                        if workload["kind"] == "StatefulSet" else None)

    def env(self, c):
        env = {}

        def expand(value):
            return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value)

        for src in c.get("envFrom", []):
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                data = self.render.configmap(self.ns, ref["name"], ref.get("optional", False))
            else:
                ref = src["secretRef"]
                data = self.render.secret(self.ns, ref["name"], self.pki, ref.get("optional", False))
            env.update({prefix + k: v.decode() for k, v in data.items()})
        for e in c.get("env", []):
            vf = e.get("valueFrom")
            if vf is None:
                env[e["name"]] = expand(e.get("value", ""))
            elif "fieldRef" in vf:
                env[e["name"]] = field_value(vf["fieldRef"]["fieldPath"], self.meta)
            elif "resourceFieldRef" in vf:
                ref = vf["resourceFieldRef"]
                kind, _, res = ref["resource"].partition(".")
                amount = (c.get("resources") or {}).get(kind, {}).get(res)
                if amount is None:
                    raise Unstartable(f"{e['name']}: {ref['resource']} is not set (the node's allocatable would be used)")
                env[e["name"]] = str(int(-(-quantity(amount) // quantity(ref.get("divisor", 1)))))
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                kind = "configMapKeyRef" if "configMapKeyRef" in vf else "secretKeyRef"
                ref = vf[kind]
                data = (self.render.configmap(self.ns, ref["name"], ref.get("optional", False)) if kind == "configMapKeyRef"
                        else self.render.secret(self.ns, ref["name"], self.pki, ref.get("optional", False)))
                if ref["key"] in data:
                    env[e["name"]] = data[ref["key"]].decode()
                elif not ref.get("optional", False):
                    raise Unstartable(f"{e['name']}: key {ref['key']!r} not in {kind[:-6]} {ref['name']!r}")
        return env

    def volume_files(self, volume):
        """(files, default mode) of a ConfigMap, Secret or projected volume; None for an emptyDir."""
        name = volume["name"]
        if "emptyDir" in volume:
            return None, 0o777
        if "configMap" in volume:
            v = volume["configMap"]
            data = self.render.configmap(self.ns, v["name"], v.get("optional", False))
            return project(data, v.get("items"), f"configmap {v['name']}"), v.get("defaultMode", 0o644)
        if "secret" in volume:
            v = volume["secret"]
            data = self.render.secret(self.ns, v["secretName"], self.pki, v.get("optional", False))
            return project(data, v.get("items"), f"secret {v['secretName']}"), v.get("defaultMode", 0o644)
        if "projected" in volume:
            files = {}
            for s in volume["projected"].get("sources", []):
                if "configMap" in s:
                    v = s["configMap"]
                    data = self.render.configmap(self.ns, v["name"], v.get("optional", False))
                    files.update(project(data, v.get("items"), f"configmap {v['name']}"))
                elif "secret" in s:
                    v = s["secret"]
                    data = self.render.secret(self.ns, v["name"], self.pki, v.get("optional", False))
                    files.update(project(data, v.get("items"), f"secret {v['name']}"))
                elif "downwardAPI" in s:
                    for it in s["downwardAPI"].get("items", []):
                        files[it["path"]] = (field_value(it["fieldRef"]["fieldPath"], self.meta).encode(),
                                             it.get("mode"))
                else:
                    raise Unstartable(f"volume {name}: projected source {sorted(s)} not modelled by this check")
            return files, volume["projected"].get("defaultMode", 0o644)
        raise Unstartable(f"volume {name}: type {sorted(set(volume) - {'name'})} not modelled by this check")

    def identity(self, c):
        sc = c.get("securityContext") or {}
        uid = sc.get("runAsUser", self.psc.get("runAsUser", IMAGE_USER))
        gid = sc.get("runAsGroup", self.psc.get("runAsGroup", uid if uid == IMAGE_USER else 0))
        if sc.get("runAsNonRoot", self.psc.get("runAsNonRoot")) and uid == 0:
            raise Unstartable("runAsNonRoot and the user is 0: the kubelet refuses to start it")
        groups = list(self.psc.get("supplementalGroups") or [])
        if self.psc.get("fsGroup") is not None:
            groups.append(self.psc["fsGroup"])
        added = (sc.get("capabilities") or {}).get("add") or []
        if added:
            raise Unstartable(f"capabilities added ({added}): not modelled by this check (meshdns needs none)")
        return uid, gid, groups, sc

    def hosts(self):
        lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
                 "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix"]
        if self.subdomain:
            lines.append(f"{POD_IP}\t{self.own_name()}\t{self.hostname}")
        else:
            lines.append(f"{POD_IP}\t{self.hostname}")
        return "\n".join(lines) + "\n"

    def own_name(self):
        """The pod's name under its headless Service, as the kubelet's hosts line gives it."""
        return f"{self.hostname}.{self.subdomain}.{self.ns}.svc.cluster.local"

    def resolv_conf(self):
        policy = self.spec.get("dnsPolicy", "ClusterFirst")
        dc = self.spec.get("dnsConfig") or {}
        if policy == "Default":
            servers, searches, options = [NODE_RESOLVER], [], []
        elif policy == "None":
            servers, searches, options = [], [], []
        else:
            servers = [KUBE_DNS]
            searches = [f"{self.ns}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
            options = ["ndots:5"]
        servers += dc.get("nameservers", [])
        searches += dc.get("searches", [])
        options += [o["name"] + (f":{o['value']}" if o.get("value") is not None else "") for o in dc.get("options", [])]
        text = "".join(f"nameserver {s}\n" for s in servers)
        if searches:
            text += "search " + " ".join(searches) + "\n"
        if options:
            text += "options " + " ".join(options) + "\n"
        return text


def port_number(container, port):
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise Unstartable(f"probe port {port!r} is no named port of the container")


def stage(pod, c, binary, work):
    """Builds the container's root file system and volumes; returns the inner runner's plan."""
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "etc"))
    os.makedirs(os.path.join(root, "proc"))
    os.makedirs(os.path.join(root, "dev"))
    shutil.copy(binary, os.path.join(root, "meshdns"))
    os.chmod(os.path.join(root, "meshdns"), 0o755)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True)
    for lib in re.findall(r"(/\S+)", ldd.stdout if ldd.returncode == 0 else ""):
        os.makedirs(os.path.dirname(root + lib), exist_ok=True)
        shutil.copy(lib, root + lib)
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
    kubelet = os.path.join(work, "kubelet")
    os.makedirs(kubelet)
    mounts = []
    for rel, text in (("etc/hosts", pod.hosts()), ("etc/resolv.conf", pod.resolv_conf()), ("etc/hostname", pod.name + "\n")):
        with open(os.path.join(kubelet, os.path.basename(rel)), "w") as f:
            f.write(text)
        open(os.path.join(root, rel), "w").close()
        mounts.append({"src": os.path.join(kubelet, os.path.basename(rel)), "dst": "/" + rel, "ro": False})
    for dev in DEVICES:
        open(os.path.join(root, "dev", dev), "w").close()
        mounts.append({"src": f"/dev/{dev}", "dst": f"/dev/{dev}", "ro": False})
    gid_fs = pod.psc.get("fsGroup")
    for i, vm in enumerate(c.get("volumeMounts", [])):
        volume = pod.volumes.get(vm["name"])
        if volume is None:
            raise Unstartable(f"volumeMount {vm['name']}: no such volume in the pod")
        files, mode = pod.volume_files(volume)
        src = os.path.join(work, "volumes", f"{i}-{vm['name']}")
        os.makedirs(src)
        if files is None:
            os.chmod(src, mode)
        else:
            write_volume(src, files, mode, gid_fs)
        if vm.get("subPath"):
            src = os.path.join(src, vm["subPath"])
        dst = os.path.join(root, vm["mountPath"].lstrip("/"))
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "w").close()
        mounts.append({"src": src, "dst": vm["mountPath"], "ro": bool(vm.get("readOnly")) or files is not None})
    return root, mounts


def run_inner(plan):
    """Runs this file's inner part in new mount and network namespaces; returns its result."""
    run = subprocess.run(["unshare", "--mount", "--net", "--", sys.executable, os.path.abspath(__file__), "--inner"],
                         input=json.dumps(plan), capture_output=True, text=True, timeout=180)
    if run.returncode:
        return {"error": f"inner runner exited {run.returncode}: {run.stderr.strip()[-800:]}"}
    return json.loads(run.stdout)


def sh(*args):
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")


def http_get(ip, port, path):
    conn = http.client.HTTPConnection(ip, port, timeout=1)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def inner():
    """In the new namespaces, as root: network, sysctls, mounts; then meshdns as the container's user."""
    plan = json.load(sys.stdin)
    root = plan["root"]
    sh("ip", "link", "set", "lo", "up")
    # The pod IP on loopback (no dummy interface module needed): probes reach it, nothing leaves.
    sh("ip", "addr", "add", f"{plan['pod_ip']}/32", "dev", "lo")
    for name, value in plan["sysctls"].items():
        with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
            f.write(str(value))
    sh("mount", "--make-rprivate", "/")
    sh("mount", "--bind", root, root)
    if plan["ro_root"]:
        sh("mount", "-o", "remount,bind,ro", root)
    sh("mount", "-t", "proc", "proc", os.path.join(root, "proc"))
    for m in plan["mounts"]:
        dst = os.path.join(root, m["dst"].lstrip("/"))
        sh("mount", "--bind", m["src"], dst)
        if m["ro"]:
            sh("mount", "-o", "remount,bind,ro", dst)
    user = [shutil.which("setpriv"), *(["--no-new-privs"] if plan["no_new_privs"] else []), shutil.which("chroot"),
            f"--userspec={plan['uid']}:{plan['gid']}"]
    if plan["groups"]:
        user.append("--groups=" + ",".join(str(g) for g in plan["groups"]))
    user.append(root)
    env = plan["env"]
    result = {}
    check = subprocess.run(user + plan["argv"] + ["--check"], env=env, capture_output=True, text=True, timeout=60)
    result["check"] = {"rc": check.returncode, "out": check.stderr + check.stdout}
    proc = subprocess.Popen(user + plan["argv"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + plan["probe"]["budget"]
    status = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status = http_get(plan["pod_ip"], plan["probe"]["port"], plan["probe"]["path"])
            if status == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    started = time.monotonic() + plan["probe"]["budget"] - deadline
    result["start"] = {"status": status, "exited": proc.poll(), "seconds": round(started, 1)}
    if proc.poll() is None:
        proc.terminate()
        try:
            rc = proc.wait(timeout=plan["grace"])
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "killed after the grace period"
    else:
        rc = proc.returncode
    result["stop"] = {"rc": rc}
    result["log"] = proc.stdout.read()[-1500:]
    json.dump(result, sys.stdout)


def check_container(label, pod, c, args, binary):
    CHECKS.labelled(label, f"image is the release reference {args.image}", c.get("image") == args.image,
                    f"image: {c.get('image')!r}")
    work = tempfile.mkdtemp(prefix="meshdns-start-")
    try:
        try:
            env = pod.env(c)
            uid, gid, groups, sc = pod.identity(c)
            root, mounts = stage(pod, c, binary, work)
            probe = c.get("startupProbe") or c.get("readinessProbe") or {}
            get = probe.get("httpGet")
            if get is None:
                raise Unstartable("no httpGet startup or readiness probe to wait for")
            budget = probe.get("initialDelaySeconds", 0) + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
            plan = {"root": root, "mounts": mounts, "env": env, "uid": uid, "gid": gid, "groups": groups,
                    "ro_root": bool(sc.get("readOnlyRootFilesystem")),
                    "no_new_privs": sc.get("allowPrivilegeEscalation") is False,
                    "sysctls": {s["name"]: s["value"] for s in pod.psc.get("sysctls", [])},
                    "pod_ip": POD_IP, "argv": (c.get("command") or ENTRYPOINT) + (c.get("args") or []),
                    "probe": {"port": port_number(c, get["port"]), "path": get.get("path", "/"), "budget": budget},
                    "grace": pod.spec.get("terminationGracePeriodSeconds", 30)}
        except Unstartable as why:
            CHECKS.labelled(label, "the kubelet can assemble its environment and volumes", False, str(why))
            return
        CHECKS.labelled(label, f"the kubelet can assemble its environment and volumes ({len(mounts) - 3 - len(DEVICES)} mounts)", True)
        result = run_inner(plan)
        if "error" in result:
            CHECKS.labelled(label, "runs in its own mount and network namespace", False, result["error"])
            return
        who = f"uid {uid} gid {gid}" + (f" groups {groups}" if groups else "")
        sysctl = plan["sysctls"].get("net.ipv4.ip_unprivileged_port_start", "unset: 1024")
        CHECKS.labelled(label, f"meshdns --check exits 0 in the pod's file system as {who}", result["check"]["rc"] == 0,
                        f"exit {result['check']['rc']}: {result['check']['out'].strip()[-1500:]}")
        if env.get("MESHDNS_POD_IP") and pod.subdomain:
            row = re.search(rf"^\s+{re.escape(pod.own_name())}\.\s+self\s", result["check"]["out"], re.M)
            CHECKS.labelled(label, f"answers the pod's own name {pod.own_name()} itself (downward API and the "
                            "kubelet's hosts line)", row is not None, "no `self` row in meshdns --check")
        start = result["start"]
        CHECKS.labelled(label, f"starts as {who} with ip_unprivileged_port_start={sysctl}: listeners bound, "
                        f"{plan['probe']['path']} on {POD_IP}:{plan['probe']['port']} answers 200 within "
                        f"{budget}s ({start['seconds']}s)", start["status"] == 200,
                        f"probe status {start['status']}, exit {start['exited']}: {result['log'].strip()}")
        CHECKS.labelled(label, f"SIGTERM: exits 0 within the grace period ({plan['grace']}s)", result["stop"]["rc"] == 0,
                        f"exit {result['stop']['rc']}: {result['log'].strip()[-500:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if sys.argv[1:] == ["--inner"]:
        return inner()
    ap = argparse.ArgumentParser()
    ap.add_argument("rendered")
    ap.add_argument("label")
    ap.add_argument("--image", required=True)
    args = ap.parse_args()
    binary = os.environ.get("MESHDNS_BIN")
    with open(args.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    render = Render(docs)
    found = 0
    with tempfile.TemporaryDirectory(prefix="meshdns-pki-") as pki_dir:
        pki = Pki(pki_dir)
        for w in docs:
            if w["kind"] not in WORKLOAD_KINDS:
                continue
            pod = Pod(w, render, pki)
            for c in pod.spec.get("initContainers", []) + pod.spec.get("containers", []):
                if not is_meshdns(c):
                    continue
                found += 1
                label = f"{args.label} {w['kind']}/{w['metadata']['name']} container {c['name']}"
                if binary:
                    check_container(label, pod, c, args, binary)
                else:
                    CHECKS.labelled(label, "a meshdns binary to start it with (MESHDNS_BIN)", False, "none built")
    CHECKS.labelled(args.label, "the render has a meshdns container", found > 0, "none")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
