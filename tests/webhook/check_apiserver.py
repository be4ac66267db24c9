"""The injection webhook behind a real kube-apiserver (tests/webhook/run.sh runs it in a network
namespace of its own, after check_webhook.py, when build_apiserver.sh could provide the API
server and etcd).

etcd and kube-apiserver start on loopback; the webhook (`meshdns webhook`) listens on a
documentation address (192.0.2.10, added to this namespace's lo: the API server refuses
loopback endpoints) behind the repository's own Service and MutatingWebhookConfiguration
(k8s/webhook, its caBundle filled in as cert-manager's cainjector would). Then, with kubectl:
the operators' pods created in a labelled namespace (Pod Security `restricted` enforced for the
ones whose operator runs them so) and read back from the API (injected once; the restricted
ones accepted), excluded pods untouched (kube-system, opt-out, hostNetwork with its warning, an
unlabelled namespace), the pod label selecting a pod elsewhere, failurePolicy Fail refusing a
selected pod while the webhook is stopped (and not touching the others), and every manifest
the docs name applied with --dry-run=server.

usage: check_apiserver.py KUBE_APISERVER ETCD
"""

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check_webhook as cw  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", "kubectl")
WEBHOOK_IP = "192.0.2.10"
TOKEN = "meshdns-webhook-test-token"
check = cw.check


def run(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def kubectl(work, *args, stdin=None):
    cmd = [KUBECTL, "--kubeconfig", os.path.join(work, "kubeconfig"), *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)


def start_etcd(etcd, work):
    data = os.path.join(work, "etcd")
    log = open(os.path.join(work, "etcd.log"), "w")
    return subprocess.Popen([etcd, "--data-dir", data,
                             "--listen-client-urls", "http://127.0.0.1:2379",
                             "--advertise-client-urls", "http://127.0.0.1:2379",
                             "--listen-peer-urls", "http://127.0.0.1:2380",
                             "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                             "--initial-cluster", "default=http://127.0.0.1:2380"],
                            stdout=log, stderr=subprocess.STDOUT)


def start_apiserver(binary, work):
    sa_key = os.path.join(work, "sa.key")
    cw.openssl("genrsa", "-out", sa_key, "2048")
    tokens = os.path.join(work, "tokens.csv")
    with open(tokens, "w") as f:
        f.write(f'{TOKEN},admin,admin,"system:masters"\n')
    log = open(os.path.join(work, "apiserver.log"), "w")
    proc = subprocess.Popen([
        binary,
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
        f"--cert-dir={os.path.join(work, 'apiserver-certs')}",
        f"--token-auth-file={tokens}", "--authorization-mode=AlwaysAllow",
        f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--service-cluster-ip-range=10.96.0.0/16",
        # Webhook Services are called at an endpoint of theirs, not through a cluster IP:
        # there is no kube-proxy here.
        "--enable-aggregator-routing=true",
        # No controller manager creates the namespaces' service accounts here.
        "--disable-admission-plugins=ServiceAccount",
        # Real clusters allow privileged containers (TiDB Operator's sysctl init container).
        "--allow-privileged=true",
    ], stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(work, "kubeconfig"), "w") as f:
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "t", "cluster": {"server": "https://127.0.0.1:6443",
                                                   "insecure-skip-tls-verify": True}}],
            "users": [{"name": "t", "user": {"token": TOKEN}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            "current-context": "t",
        }, f)
    return proc


def wait_api(work, proc):
    for _ in range(120):
        if proc.poll() is not None:
            return False
        if kubectl(work, "get", "--raw", "/readyz").returncode == 0:
            return True
        time.sleep(1)
    return False


def register_webhook(work, ca_crt):
    """The repository's Service and MutatingWebhookConfiguration, the caBundle filled in, and
    the Service's endpoint at the webhook's address (no endpoints controller runs here)."""
    with open(ca_crt, "rb") as f:
        bundle = base64.b64encode(f.read()).decode()
    with open(os.path.join(ROOT, "k8s", "webhook", "mutatingwebhook.yaml")) as f:
        config = yaml.safe_load(f)
    for hook in config["webhooks"]:
        hook["clientConfig"]["caBundle"] = bundle
    with open(os.path.join(ROOT, "k8s", "webhook", "service.yaml")) as f:
        service = yaml.safe_load(f)
    service["metadata"]["namespace"] = "meshdns-webhook"
    labels = {"kubernetes.io/service-name": "meshdns-webhook"}
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": "meshdns-webhook-test", "namespace": "meshdns-webhook",
                           "labels": labels},
              "addressType": "IPv4",
              "endpoints": [{"addresses": [WEBHOOK_IP], "conditions": {"ready": True}}],
              "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]}
    endpoints = {"apiVersion": "v1", "kind": "Endpoints",
                 "metadata": {"name": "meshdns-webhook", "namespace": "meshdns-webhook"},
                 "subsets": [{"addresses": [{"ip": WEBHOOK_IP}],
                              "ports": [{"name": "https", "port": 8443, "protocol": "TCP"}]}]}
    docs = [service, slice_, endpoints, config]
    out = kubectl(work, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    return out.returncode == 0, out.stderr


def namespaces(work):
    for name, labels in [
        ("meshdns-webhook", {"pod-security.kubernetes.io/enforce": "restricted"}),
        ("db", {"meshdns/inject": "enabled", "pod-security.kubernetes.io/enforce": "restricted"}),
        ("db2", {"meshdns/inject": "enabled"}),
        ("other", {}),
    ]:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        kubectl(work, "apply", "-f", "-", stdin=yaml.safe_dump(ns))


def create(work, pod, namespace):
    """kubectl create; (ok, stored pod or None, kubectl's stderr: warnings, errors)."""
    out = kubectl(work, "-n", namespace, "create", "-f", "-", "-o", "json", stdin=json.dumps(pod))
    if out.returncode != 0:
        return False, None, out.stderr
    return True, json.loads(out.stdout), out.stderr


def sidecars(pod):
    return [c for c in pod["spec"].get("initContainers", []) if c["name"] == "meshdns"]


def check_operator_pods(work):
    with open(os.path.join(HERE, "operator_pods.yaml")) as f:
        entries = yaml.safe_load(f)
    for entry in entries:
        name = entry["operator"]
        namespace = "db" if entry["restricted"] else "db2"
        ok, stored, err = create(work, entry["pod"], namespace)
        if not check(f"API server: {name}: created in {namespace}"
                     + (" (Pod Security restricted enforced)" if entry["restricted"] else ""),
                     ok, err[-300:]):
            continue
        spec = stored["spec"]
        check(f"API server: {name}: stored with the sidecar once, first, DNS through it",
              len(sidecars(stored)) == 1 and spec["initContainers"][0]["name"] == "meshdns"
              and spec["dnsPolicy"] == "None" and spec["dnsConfig"]["nameservers"] == ["127.0.0.1"]
              and spec["dnsConfig"]["searches"][0] == f"{namespace}.svc.cluster.local",
              json.dumps(spec.get("initContainers", []))[:200])


def check_excluded(work):
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "opted-out"
    pod["metadata"]["annotations"] = {"meshdns/inject": "false"}
    cases = [("annotated meshdns/inject: \"false\"", pod, "db2", False)]
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "in-kube-system"
    pod["metadata"]["labels"]["meshdns/inject"] = "true"
    cases.append(("labelled, but in kube-system", pod, "kube-system", False))
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "host-network"
    pod["spec"]["hostNetwork"] = True
    cases.append(("hostNetwork", pod, "db2", True))
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "unlabelled"
    cases.append(("in an unlabelled namespace", pod, "other", False))
    for what, pod, namespace, warned in cases:
        ok, stored, err = create(work, pod, namespace)
        check(f"API server: excluded: {what}: created untouched"
              + (" with the webhook's warning" if warned else ""),
              ok and not sidecars(stored) and "meshdns/injected" not in stored["metadata"].get("annotations", {})
              and (("meshdns sidecar not injected" in err) == warned), err[-300:])
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "pod-label"
    pod["metadata"]["labels"]["meshdns/inject"] = "true"
    ok, stored, err = create(work, pod, "other")
    check("API server: the pod label selects a pod in an unlabelled namespace",
          ok and len(sidecars(stored)) == 1, err[-300:])


def check_fail_policy(work, webhook):
    webhook.send_signal(signal.SIGTERM)
    webhook.wait(timeout=10)
    pod = cw.cnpg_pod()
    pod["metadata"]["name"] = "while-down"
    ok, _, err = create(work, pod, "db")
    check("API server: failurePolicy Fail: with the webhook stopped, a selected pod is refused",
          not ok and "meshdns" in err, err[-300:])
    pod["metadata"]["name"] = "while-down-elsewhere"
    ok, stored, err = create(work, pod, "other")
    check("API server: with the webhook stopped, pods outside the selectors are created",
          ok and not sidecars(stored), err[-300:])


def check_dry_run(work):
    rendered = kubectl(work, "kustomize", os.path.join(ROOT, "k8s", "webhook"))
    if not check("kubectl kustomize k8s/webhook", rendered.returncode == 0, rendered.stderr[-300:]):
        return
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    # cert-manager's kinds need its CRDs, which this API server does not have.
    ours = [d for d in docs if not d["apiVersion"].startswith("cert-manager.io/")]
    out = kubectl(work, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(ours))
    check(f"API server: kubectl apply --dry-run=server of k8s/webhook ({len(ours)} objects; "
          f"{len(docs) - len(ours)} cert-manager objects need its CRDs)",
          out.returncode == 0, out.stderr[-400:])


def main():
    apiserver, etcd = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="meshdns-apiserver-")
    run("ip", "addr", "add", f"{WEBHOOK_IP}/32", "dev", "lo")
    procs = []
    try:
        procs.append(start_etcd(etcd, work))
        api = start_apiserver(apiserver, work)
        procs.append(api)
        if not check("kube-apiserver and etcd start and turn ready", wait_api(work, api)):
            with open(os.path.join(work, "apiserver.log")) as f:
                print("".join(f.readlines()[-20:]))
            return
        ca = cw.make_ca(work)
        mounted = os.path.join(work, "secret")
        os.makedirs(mounted)
        cw.install_leaf(cw.make_leaf(work, ca, "api", ips=(WEBHOOK_IP,)), mounted)
        env = {"PATH": os.environ.get("PATH", ""),
               "MESHDNS_WEBHOOK_LISTEN": f"{WEBHOOK_IP}:8443",
               "MESHDNS_WEBHOOK_CERT_FILE": os.path.join(mounted, "tls.crt"),
               "MESHDNS_WEBHOOK_KEY_FILE": os.path.join(mounted, "tls.key"),
               "MESHDNS_WEBHOOK_IMAGE": cw.IMAGE,
               "MESHDNS_ADMIN_LISTEN": f"{cw.ADMIN[0]}:{cw.ADMIN[1]}"}
        webhook = subprocess.Popen([cw.BIN, "webhook"], env=env, stdout=subprocess.DEVNULL,
                                   stderr=open(os.path.join(work, "webhook.log"), "w"))
        procs.append(webhook)
        check("the webhook starts", cw.wait_ready(webhook))
        namespaces(work)
        ok, err = register_webhook(work, ca[1])
        if not check("the repository's MutatingWebhookConfiguration registered, caBundle filled", ok, err):
            return
        check_operator_pods(work)
        check_excluded(work)
        check_dry_run(work)
        check_fail_policy(work, webhook)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        print(f"{cw.PASSED} passed, {cw.FAILED} failed")
        sys.exit(1 if cw.FAILED else 0)


if __name__ == "__main__":
    main()
