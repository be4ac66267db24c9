"""The injection webhook through its real HTTPS endpoint (tests/webhook/run.sh runs this in a
network namespace of its own, as root, with the release binary).

For each pod of operator_pods.yaml (pods as the database operators create them), an
admission.k8s.io/v1 AdmissionReview is POSTed to `meshdns webhook`; the JSON patch it returns is
applied with PyPI's jsonpatch, and the patched pod must be: schema-valid (kubernetes-validate,
strict), what the kustomize Component adds (k8s/components/sidecar/sidecar.yaml), restricted
where the operator's pod was, `meshdns --check`-clean on the sidecar's environment, answering a
peer member's name through the sidecar started with that environment, and left unchanged by a
second review. Then: excluded pods untouched, malformed requests answered with an error, the
certificate renewed without a restart (its expiry and reload exported with
listener="webhook"), the counters, and a clean SIGTERM.

Prints one PASS/FAIL line per check and "N passed, M failed"; exits 1 on any failure.
"""

import base64
import copy
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import dns.message
import dns.query
import dns.rrset
import jsonpatch
import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
from check_pod import restricted  # noqa: E402

BIN = os.environ.get("MESHDNS_BIN", os.path.join(ROOT, "target", "release", "meshdns"))
K8S_VERSION = "1.33.0"
IMAGE = "ghcr.io/meshdns/meshdns:test"
NAMESPACE = "db"
WEBHOOK = ("127.0.0.1", 18443)
ADMIN = ("127.0.0.1", 19153)
PEER_A, PEER_B = "127.0.0.21", "127.0.0.22"
POD_IP = "127.0.0.30"
PEER_ANSWER = "10.2.0.7"
# The sysctls the restricted (and baseline) Pod Security Standard allows.
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}

PASSED = FAILED = 0


def check(name, ok, why=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"PASS {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}" + (f": {why}" if why else ""))
    return ok


# ------------------------------------------------------------------ certificates
def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(work):
    key, crt = os.path.join(work, "ca.key"), os.path.join(work, "ca.crt")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=meshdns-webhook-test-ca")
    return key, crt


def make_leaf(work, ca, tag, names=("meshdns-webhook.meshdns-webhook.svc",), ips=("127.0.0.1",)):
    """A serving certificate signed by `ca`, written as tls.crt/tls.key in a directory of its own."""
    out = os.path.join(work, f"leaf-{tag}")
    os.makedirs(out, exist_ok=True)
    key, csr, crt = (os.path.join(out, n) for n in ("tls.key", "tls.csr", "tls.crt"))
    ext = os.path.join(out, "ext.cnf")
    sans = ",".join([f"DNS:{n}" for n in names] + [f"IP:{i}" for i in ips])
    with open(ext, "w") as f:
        f.write(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", f"/CN=meshdns-webhook-{tag}")
    openssl("x509", "-req", "-in", csr, "-CA", ca[1], "-CAkey", ca[0], "-CAcreateserial",
            "-days", "1", "-extfile", ext, "-out", crt)
    os.chmod(key, 0o644)
    return out


def install_leaf(leaf, mounted):
    """Lays a certificate pair into `mounted` the way the kubelet renews a Secret: a new data
    directory, the `..data` symlink swapped atomically."""
    stamp = f"..{time.time_ns()}"
    data = os.path.join(mounted, stamp)
    os.makedirs(data)
    for name in ("tls.crt", "tls.key"):
        with open(os.path.join(leaf, name), "rb") as src, open(os.path.join(data, name), "wb") as dst:
            dst.write(src.read())
        link = os.path.join(mounted, name)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", name), link)
    tmp = os.path.join(mounted, "..data_tmp")
    os.symlink(stamp, tmp)
    os.replace(tmp, os.path.join(mounted, "..data"))


# ------------------------------------------------------------------ the webhook's endpoint
def tls_context(ca_crt):
    ctx = ssl.create_default_context(cafile=ca_crt)
    ctx.check_hostname = True
    return ctx


def post(ctx, body, path="/mutate", method="POST", headers=None):
    conn = http.client.HTTPSConnection(*WEBHOOK, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def review(pod, namespace=NAMESPACE, uid="0f1e2d3c", operation="CREATE", kind=None):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod.get("metadata", {}).get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:operators:operator"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def mutate(ctx, pod, **kw):
    """The response of one review: (response dict, patched pod or None)."""
    status, body = post(ctx, json.dumps(review(pod, **kw)).encode())
    if status != 200:
        raise AssertionError(f"HTTP {status}: {body[:200]!r}")
    answer = json.loads(body)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == kw.get("uid", "0f1e2d3c")
    if "patch" not in response:
        return response, None
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return response, jsonpatch.JsonPatch(ops).apply(pod)


# ------------------------------------------------------------------ the Component's sidecar
def component():
    with open(os.path.join(ROOT, "k8s", "components", "sidecar", "sidecar.yaml")) as f:
        template = yaml.safe_load(f)["spec"]["template"]
    container = template["spec"]["initContainers"][0]
    container["image"] = IMAGE
    dns_config = template["spec"]["dnsConfig"]
    dns_config["searches"][0] = dns_config["searches"][0].replace("NAMESPACE", NAMESPACE)
    return template, container


def check_like_component(name, before, after):
    template, container = component()
    spec = after["spec"]
    check(f"{name}: the sidecar is the Component's, first among the init containers",
          spec["initContainers"][0] == container,
          json.dumps(spec["initContainers"][0])[:300])
    check(f"{name}: the other containers are untouched",
          spec["initContainers"][1:] == before["spec"].get("initContainers", [])
          and spec["containers"] == before["spec"]["containers"])
    check(f"{name}: dnsPolicy None", spec["dnsPolicy"] == "None")
    want_dns = copy.deepcopy(template["spec"]["dnsConfig"])
    own = before["spec"].get("dnsConfig") or {}
    if own:
        names = [o["name"] for o in own.get("options", [])]
        want_dns["options"] = own.get("options", []) + [
            o for o in want_dns["options"] if o["name"] not in names]
        want_dns["searches"] += [s for s in own.get("searches", []) if s not in want_dns["searches"]]
    check(f"{name}: dnsConfig is the Component's, the pod's own options and searches kept",
          spec["dnsConfig"] == want_dns, json.dumps(spec["dnsConfig"]))
    sysctls = spec["securityContext"]["sysctls"]
    own_sysctls = (before["spec"].get("securityContext") or {}).get("sysctls", [])
    check(f"{name}: the port-53 sysctl added, the pod's own kept",
          sysctls == own_sysctls + template["spec"]["securityContext"]["sysctls"], json.dumps(sysctls))
    rest = {k: v for k, v in spec["securityContext"].items() if k != "sysctls"}
    before_rest = {k: v for k, v in (before["spec"].get("securityContext") or {}).items() if k != "sysctls"}
    check(f"{name}: the rest of the pod's securityContext untouched", rest == before_rest)
    check(f"{name}: the configuration volume added last, the pod's kept",
          spec["volumes"] == before["spec"].get("volumes", []) + template["spec"]["volumes"])
    labels = after["metadata"]["labels"]
    check(f"{name}: the sidecar label added, the operator's kept",
          labels == {**before["metadata"].get("labels", {}), "meshdns/sidecar": "true"})
    check(f"{name}: annotated as injected",
          after["metadata"]["annotations"].get("meshdns/injected", "") != "")


def check_valid(name, entry, after):
    pod = copy.deepcopy(after)
    pod["metadata"]["namespace"] = NAMESPACE
    try:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        check(f"{name}: schema-valid (kubernetes-validate {K8S_VERSION}, strict)", True)
    except Exception as e:  # noqa: BLE001 - the library raises several types
        check(f"{name}: schema-valid (kubernetes-validate {K8S_VERSION}, strict)", False, str(e)[:300])
    psc = after["spec"].get("securityContext") or {}
    sidecar = after["spec"]["initContainers"][0]
    ok, why = restricted(psc, sidecar.get("securityContext") or {})
    check(f"{name}: the sidecar meets the restricted Pod Security Standard", ok, why)
    if entry.get("restricted"):
        bad = []
        for c in after["spec"].get("initContainers", []) + after["spec"]["containers"]:
            ok, why = restricted(psc, c.get("securityContext") or {})
            if not ok:
                bad.append(f"{c['name']}: {why}")
        unsafe = {s["name"] for s in psc.get("sysctls", [])} - SAFE_SYSCTLS
        if unsafe:
            bad.append(f"sysctls {sorted(unsafe)}")
        check(f"{name}: the whole pod still meets the restricted Pod Security Standard",
              not bad, "; ".join(bad))


# ------------------------------------------------------------------ the sidecar's environment
def sidecar_env(after, work):
    """The sidecar's environment as the kubelet would make it: the downward API fields filled,
    the configuration volume a directory, resolv.conf and /etc/hosts as the kubelet writes them."""
    spec = after["spec"]
    sidecar = spec["initContainers"][0]
    fields = {"status.podIP": POD_IP, "status.podIPs": POD_IP, "metadata.namespace": NAMESPACE}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for e in sidecar["env"]:
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    config = os.path.join(work, "config")
    os.makedirs(config, exist_ok=True)
    for name, value in {
        "MESHDNS_CLUSTERS": f"a={PEER_A}:53; b={PEER_B}:53",
        "MESHDNS_LOCAL_CLUSTER": "a",
        "MESHDNS_UPSTREAMS": PEER_A,
    }.items():
        with open(os.path.join(config, name), "w") as f:
            f.write(value + "\n")
    mount = sidecar["volumeMounts"][0]
    assert env["MESHDNS_CONFIG_DIR"] == mount["mountPath"], "the volume is mounted where it is read"
    env["MESHDNS_CONFIG_DIR"] = config
    dns_config = spec["dnsConfig"]
    resolv = os.path.join(work, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("".join(f"nameserver {n}\n" for n in dns_config["nameservers"]))
        f.write("search " + " ".join(dns_config["searches"]) + "\n")
        opts = [o["name"] + (f":{o['value']}" if "value" in o else "") for o in dns_config["options"]]
        f.write("options " + " ".join(opts) + "\n")
    env["MESHDNS_RESOLV_CONF"] = resolv
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        host, sub = spec.get("hostname", "pod"), spec.get("subdomain")
        fqdn = f"{host}.{sub}.{NAMESPACE}.svc.cluster.local" if sub else host
        f.write(f"127.0.0.1 localhost\n{POD_IP} {fqdn} {host}\n")
    env["MESHDNS_HOSTS_FILE"] = hosts
    return env


class FakePeer:
    """A cluster's DNS on ADDR:53 over UDP: every A question under svc.cluster.local answered
    with PEER_ANSWER; remembers the names it was asked."""

    def __init__(self, addr):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, 53))
        self.sock.settimeout(0.2)
        self.asked = []
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                data, client = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            query = dns.message.from_wire(data)
            reply = dns.message.make_response(query)
            question = query.question[0]
            name = question.name.to_text()
            self.asked.append(name)
            if name.endswith(".svc.cluster.local.") and question.rdtype == 1:
                reply.answer.append(dns.rrset.from_text(question.name, 30, "IN", "A", PEER_ANSWER))
            else:
                reply.set_rcode(3)
            self.sock.sendto(reply.to_wire(), client)

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def check_sidecar_runs(name, after, work, peer_b):
    env = sidecar_env(after, work)
    checked = subprocess.run([BIN, "--check"], env=env, capture_output=True, text=True, timeout=20)
    check(f"{name}: meshdns --check passes on the sidecar's environment",
          checked.returncode == 0 and "cluster.b" in checked.stdout, checked.stderr[-300:])
    sidecar = subprocess.Popen([BIN], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    spec = after["spec"]
    # Cluster b's zone (MESHDNS_CLUSTER_ZONE, cluster.{name}) stands for its svc.cluster.local.
    peer = f"{spec['hostname'][:-1]}1.{spec['subdomain']}.{NAMESPACE}.cluster.b."
    try:
        answer = None
        for _ in range(50):
            try:
                answer = dns.query.udp(dns.message.make_query(peer, "A"), "127.0.0.1", timeout=0.5)
                break
            except (dns.exception.Timeout, ConnectionRefusedError, OSError):
                time.sleep(0.1)
        got = [r.address for rrset in (answer.answer if answer else []) for r in rrset]
        asked = peer.replace(".cluster.b.", ".svc.cluster.local.")
        check(f"{name}: the sidecar started with the patch's environment resolves a peer member",
              got == [PEER_ANSWER] and asked in peer_b.asked,
              f"answer {got}, peer asked {peer_b.asked[-3:]}")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        try:
            sidecar.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sidecar.kill()
            sidecar.wait()


# ------------------------------------------------------------------ the cases
def check_operator_pods(ctx, work, peer_b):
    with open(os.path.join(HERE, "operator_pods.yaml")) as f:
        entries = yaml.safe_load(f)
    injected_count = 0
    for i, entry in enumerate(entries):
        name, pod = entry["operator"], entry["pod"]
        try:
            response, after = mutate(ctx, copy.deepcopy(pod))
        except Exception as e:  # noqa: BLE001
            check(f"{name}: answered", False, str(e))
            continue
        if not check(f"{name}: admitted with a JSON patch", response["allowed"] and after is not None,
                     json.dumps(response)[:300]):
            continue
        injected_count += 1
        check_like_component(name, pod, after)
        check_valid(name, entry, after)
        again, twice = mutate(ctx, copy.deepcopy(after))
        check(f"{name}: a second review (reinvocation) changes nothing",
              again["allowed"] and twice is None and "warnings" not in again)
        pod_work = os.path.join(work, f"pod-{i}")
        os.makedirs(pod_work, exist_ok=True)
        check_sidecar_runs(name, after, pod_work, peer_b)
    return injected_count


def cnpg_pod():
    with open(os.path.join(HERE, "operator_pods.yaml")) as f:
        entries = yaml.safe_load(f)
    return copy.deepcopy(next(e["pod"] for e in entries if e["operator"] == "CloudNativePG"))


def check_exclusions(ctx):
    _, container = component()
    cases = []
    pod = cnpg_pod()
    pod["metadata"]["annotations"] = {"meshdns/inject": "false"}
    cases.append(("annotated meshdns/inject: \"false\"", pod, {}, False))
    cases.append(("in kube-system", cnpg_pod(), {"namespace": "kube-system"}, False))
    pod = cnpg_pod()
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": "meshdns-webhook"}
    cases.append(("the webhook's own pod", pod, {}, False))
    pod = cnpg_pod()
    pod["spec"]["initContainers"].insert(0, container)
    cases.append(("carrying the sidecar by hand", pod, {}, False))
    pod = cnpg_pod()
    pod["spec"]["hostNetwork"] = True
    cases.append(("hostNetwork", pod, {}, True))
    pod = cnpg_pod()
    pod["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    cases.append(("dnsPolicy ClusterFirstWithHostNet", pod, {}, True))
    pod = cnpg_pod()
    pod["spec"]["containers"].append({"name": "dnsmasq", "image": "dnsmasq",
                                      "ports": [{"containerPort": 53, "protocol": "UDP"}]})
    cases.append(("a container already on port 53", pod, {}, True))
    cases.append(("an UPDATE, not a CREATE", cnpg_pod(), {"operation": "UPDATE"}, False))
    for what, pod, kw, warned in cases:
        response, after = mutate(ctx, pod, **kw)
        warnings = response.get("warnings", [])
        ok = response["allowed"] and after is None and bool(warnings) == warned
        check(f"excluded: {what}: admitted unchanged" + (" with a warning" if warned else ""),
              ok, json.dumps(response)[:300])


def check_malformed(ctx):
    deep = b"[" * 100_000 + b"]" * 100_000
    not_review = json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode()
    no_uid = review(cnpg_pod())
    del no_uid["request"]["uid"]
    cases = [
        ("not JSON", b"{nope", 400),
        ("JSON nested 100,000 deep", deep, 400),
        ("not an AdmissionReview", not_review, 400),
        ("an AdmissionReview v1beta1", json.dumps({**review(cnpg_pod()), "apiVersion": "admission.k8s.io/v1beta1"}).encode(), 400),
        ("no request uid", json.dumps(no_uid).encode(), 400),
        ("an empty body", b"", 400),
    ]
    for what, body, want in cases:
        status, text = post(ctx, body)
        check(f"malformed: {what}: HTTP {want}", status == want, f"HTTP {status} {text[:120]!r}")
    status, text = post(ctx, b"", method="GET")
    check("malformed: GET /mutate: HTTP 405", status == 405, f"HTTP {status}")
    status, text = post(ctx, b"{}", path="/validate")
    check("malformed: another path: HTTP 404", status == 404, f"HTTP {status}")
    deployment = {"group": "apps", "version": "v1", "kind": "Deployment"}
    response, after = mutate(ctx, {"metadata": {}, "spec": {}}, kind=deployment)
    check("malformed: a Deployment sent by a misconfigured rule: denied with a reason",
          not response["allowed"] and response["status"]["code"] == 400
          and "Pods only" in response["status"]["message"], json.dumps(response))
    response, after = mutate(ctx, {"metadata": {"name": "x"}, "spec": "nope"})
    check("malformed: a pod whose spec is not an object: denied", not response["allowed"])
    # A 4 MiB body announced: refused from its headers, before it is sent.
    conn = http.client.HTTPSConnection(*WEBHOOK, context=ctx, timeout=10)
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Length", str(4 << 20))
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    check("malformed: a 4 MiB body: HTTP 413 before it is sent", status == 413, f"HTTP {status}")
    # A body that never ends: the limit stops it, chunked, without a Content-Length.
    conn = http.client.HTTPSConnection(*WEBHOOK, context=ctx, timeout=10)
    conn.putrequest("POST", "/mutate")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    status = None
    try:
        for _ in range(64):
            chunk = b"a" * (128 << 10)
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
        status = conn.getresponse().status
    except OSError:  # the server closed the connection mid-body (ssl.SSLError is one)
        status = "closed"
    finally:
        conn.close()
    check("malformed: a chunked body past the limit is refused (413 or closed)",
          status in (413, "closed"), f"{status}")


def peer_certificate(ctx):
    with socket.create_connection(WEBHOOK, timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="meshdns-webhook.meshdns-webhook.svc") as tls:
            return tls.getpeercert(binary_form=True)


def pem_to_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def not_after(leaf):
    """The notAfter of `leaf`'s certificate, Unix time."""
    out = subprocess.run(["openssl", "x509", "-enddate", "-noout", "-in", os.path.join(leaf, "tls.crt")],
                         check=True, capture_output=True, text=True).stdout
    return ssl.cert_time_to_seconds(out.strip().split("=", 1)[1])


EXPIRY = ("meshdns_server_certificate_expiry_timestamp_seconds", 'listener="webhook"')
RELOADS = ("meshdns_server_certificate_reloads_total", 'listener="webhook",result="applied"')


def check_expiry_shown(first):
    check("metrics: the served certificate's expiry, listener=\"webhook\", is the one loaded at start",
          metric(*EXPIRY) == not_after(first), f"{metric(*EXPIRY)} != {not_after(first)}")


def check_renewal(ctx, work, ca, mounted):
    leaf = make_leaf(work, ca, "renewed")
    before = peer_certificate(ctx)
    install_leaf(leaf, mounted)
    want = pem_to_der(os.path.join(leaf, "tls.crt"))
    deadline = time.time() + 30
    got = before
    while time.time() < deadline and got != want:
        time.sleep(0.5)
        got = peer_certificate(ctx)
    check("certificate: a renewed Secret is served to new connections without a restart",
          got == want and got != before)
    while time.time() < deadline and metric(*RELOADS) != 1:
        time.sleep(0.2)
    check("metrics: the renewal counted as an applied reload of listener=\"webhook\", its expiry shown",
          metric(*RELOADS) == 1 and metric(*EXPIRY) == not_after(leaf),
          f"reloads {metric(*RELOADS)}, expiry {metric(*EXPIRY)}, the renewed one's {not_after(leaf)}")


def metric(name, labels):
    """The value of `name{labels}` (labels as exported, e.g. 'result="injected"'), or None."""
    with urllib.request.urlopen(f"http://{ADMIN[0]}:{ADMIN[1]}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{{labels}}} '):
            return float(line.split()[-1])
    return None


def wait_ready(proc):
    for _ in range(100):
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{ADMIN[0]}:{ADMIN[1]}/readyz", timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def main():
    work = tempfile.mkdtemp(prefix="meshdns-webhook-")
    ca = make_ca(work)
    mounted = os.path.join(work, "secret")
    os.makedirs(mounted)
    first = make_leaf(work, ca, "first")
    install_leaf(first, mounted)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "MESHDNS_WEBHOOK_LISTEN": f"{WEBHOOK[0]}:{WEBHOOK[1]}",
        "MESHDNS_WEBHOOK_CERT_FILE": os.path.join(mounted, "tls.crt"),
        "MESHDNS_WEBHOOK_KEY_FILE": os.path.join(mounted, "tls.key"),
        "MESHDNS_WEBHOOK_IMAGE": IMAGE,
        "MESHDNS_ADMIN_LISTEN": f"{ADMIN[0]}:{ADMIN[1]}",
    }
    checked = subprocess.run([BIN, "webhook", "--check"], env=env, capture_output=True, text=True)
    check("meshdns webhook --check prints the webhook's configuration",
          checked.returncode == 0 and IMAGE in checked.stdout, checked.stderr)
    bad = subprocess.run([BIN, "webhook"], env={**env, "MESHDNS_WEBHOOK_IMAGE": ""},
                         capture_output=True, text=True)
    check("meshdns webhook without an image exits 64 naming the variable",
          bad.returncode == 64 and "MESHDNS_WEBHOOK_IMAGE" in bad.stderr, bad.stderr)
    log = open(os.path.join(work, "webhook.log"), "w")
    webhook = subprocess.Popen([BIN, "webhook"], env=env, stdout=log, stderr=subprocess.STDOUT)
    peers = [FakePeer(PEER_A), FakePeer(PEER_B)]
    try:
        if not check("the webhook starts and turns ready", wait_ready(webhook)):
            return
        ctx = tls_context(ca[1])
        check_expiry_shown(first)
        injected = check_operator_pods(ctx, work, peers[1])
        check_exclusions(ctx)
        check_malformed(ctx)
        check("the webhook is still serving after the malformed requests",
              webhook.poll() is None and mutate(ctx, cnpg_pod())[1] is not None)
        counted = metric("meshdns_webhook_reviews_total", 'result="injected"')
        check("metrics: meshdns_webhook_reviews_total counts the injections",
              counted is not None and counted >= injected, f"{counted} < {injected}")
        counted = metric("meshdns_webhook_reviews_total", 'result="invalid"')
        check("metrics: malformed requests counted as invalid", counted is not None and counted >= 7,
              f"{counted}")
        check_renewal(ctx, work, ca, mounted)
        webhook.send_signal(signal.SIGTERM)
        try:
            code = webhook.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        check("SIGTERM: the webhook exits 0", code == 0, f"exit {code}")
    finally:
        if webhook.poll() is None:
            webhook.kill()
        for peer in peers:
            peer.close()
        log.close()
        if FAILED:
            with open(os.path.join(work, "webhook.log")) as f:
                print("webhook log (last lines):\n" + "".join(f.readlines()[-30:]))
    print(f"{PASSED} passed, {FAILED} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
