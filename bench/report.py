#!/usr/bin/env python3
"""Turns a bench/run.sh work directory into the results table and chart.

    report.py WORKDIR RESULTS_DIR NAME

Reads WORKDIR/meta.env, WORKDIR/raw.tsv and the dnsperf / srvprobe outputs
(r<round>-<test>-<server>.out). Writes RESULTS_DIR/latest.md, RESULTS_DIR/NAME.md and
RESULTS_DIR/latest.png (when matplotlib is there) and RESULTS_DIR/latest.json (the medians and
each round's values, for programs), and prints the markdown.

Every number in the tables is the median over the rounds of that round's value; a ratio is the
median over the rounds of that round's ratio.
"""

import json
import os
import re
import statistics
import sys
from collections import defaultdict

SERVERS = ["meshdns", "unbound", "dnsmasq", "floor"]
MIB = 1024.0


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(sorted_xs, p):
    if not sorted_xs:
        return None
    k = min(len(sorted_xs) - 1, max(0, int(round(p / 100.0 * (len(sorted_xs) - 1)))))
    return sorted_xs[k]


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def dnsperf_summary(text):
    out = {}
    for key, pat in [
        ("qps", r"Queries per second:\s+([\d.]+)"),
        ("completed", r"Queries completed:\s+(\d+)"),
        ("sent", r"Queries sent:\s+(\d+)"),
        ("lost", r"Queries lost:\s+(\d+)"),
        ("runtime", r"Run time \(s\):\s+([\d.]+)"),
    ]:
        m = re.search(pat, text)
        out[key] = float(m.group(1)) if m else None
    return out


def dnsperf_latencies_us(text):
    """Per-query latencies from dnsperf -v lines: '> NOERROR h1.bench.test A 0.000059'."""
    lat = []
    for line in text.splitlines():
        if line.startswith("> "):
            try:
                lat.append(float(line.rsplit(None, 1)[1]) * 1e6)
            except (ValueError, IndexError):
                pass
    lat.sort()
    return lat


def fmt(x, digits=0, unit=""):
    if x is None:
        return "—"
    if digits == 0:
        s = f"{x:,.0f}"
    else:
        s = f"{x:,.{digits}f}"
    return s + unit


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def sub(a, b):
    return None if a is None or b is None else a - b


def fr(x):
    return "—" if x is None else f"{x:.2f}×"


def probe_lines(text):
    """bench/probe.c lines: (label, latency µs or None for a timeout, rcode, ancount), in order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            us, rcode, an = float(parts[1]), int(parts[2]), int(parts[3])
        except ValueError:
            continue
        out.append((parts[0], None if us < 0 else us, rcode, an))
    return out


def events(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def prom(text):
    """Prometheus text: {series as printed: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


OVERLOAD_CASES = {
    "a": "(a) 60,000 mangled datagrams, live upstream",
    "b": "(b) 40,000 distinct-name misses, upstream black-holed",
    "c": "(c) 300 TCP connections that never read",
}
DROP_REASONS = ["inflight_limit", "tcp_connection_limit", "malformed", "not_allowed", "tcp_stalled"]


THREAD_SERVERS = ["meshdns-t2", "unbound-t2", "meshdns-t1"]
# The sizing group: MESHDNS_THREADS=1 and 2, the cache on (hits) and off (every query a miss).
SIZING_SERVERS = ["meshdns-t1", "meshdns-t2", "meshdns-m1", "meshdns-m2"]


def new_rows(work, rounds, raw, per, meta):
    """The rows of issues 13, 15, 16, 19, 24, 25 and 26 (groups lowrate, gather's 3 x 60, reload,
    tls, threads, search, outage, overload), per round into `per`; returns what is not per
    round."""
    X = {"ovl_series": {}, "drops": defaultdict(lambda: defaultdict(list)), "ovl_notes": defaultdict(list),
         "outage_health": [], "idle": {}, "swaps_add": [], "swaps_remove": []}

    def w(name):
        return read(os.path.join(work, name))

    for r in range(1, rounds + 1):
        # ---- low rate: CPU (schedstat, all threads) and context switches per answer
        for s in ["meshdns", "unbound", "dnsmasq"]:
            q = dnsperf_summary(w(f"r{r}-low-{s}.out"))
            done = q["completed"]
            ns, cs = raw[(s, "low_cpu_ns")].get(r), raw[(s, "low_ctxsw")].get(r)
            if done and ns is not None:
                per["low_cpu_us"][s][r] = ns / 1000.0 / done
                per["low_ctxsw"][s][r] = cs / done
                per["low_qps"][s][r] = q["qps"]
                per["low_lost"][s][r] = q["lost"]
        # ---- gathered SRV, 3 x 60: per step, gathered minus the slowest of the three legs
        step, diffs, gl, bad = {}, [], [], 0
        for label, us, rcode, an in probe_lines(w(f"r{r}-big.out")):
            want = 3 * int(meta.get("big_targets", "60")) if label == "gathered" else int(meta.get("big_targets", "60"))
            if us is None or rcode != 0 or an != want:
                bad += 1
                step = {}
                continue
            step[label] = us
            if label == "gathered":
                legs = [step.get(f"leg{i}") for i in range(3)]
                gl.append(us)
                if None not in legs:
                    diffs.append(us - max(legs))
                step = {}
        gl.sort()
        diffs.sort()
        if gl:
            per["big_p50"]["meshdns"][r] = pct(gl, 50)
            per["big_p90"]["meshdns"][r] = pct(gl, 90)
            per["big_over"]["meshdns"][r] = pct(diffs, 50)
            per["big_n"]["meshdns"][r] = len(gl)
            per["big_bad"]["meshdns"][r] = bad
            ns = raw[("meshdns", "big_cpu_ns")].get(r)
            if ns is not None:
                per["big_cpu_us"]["meshdns"][r] = ns / 1000.0 / len(gl)
            cs = raw[("meshdns", "big_ctxsw")].get(r)
            if cs is not None:
                per["big_ctxsw"]["meshdns"][r] = cs / len(gl)
        # ---- live configuration: swap to answer; p50/p99 steady vs reloading
        for i, line in enumerate(w(f"r{r}-swap.out").splitlines()):
            parts = line.split()
            if len(parts) == 2:
                add, rem = float(parts[0]), float(parts[1])
                if add >= 0:
                    X["swaps_add"].append(add)
                if rem >= 0 and i > 0:  # the first removal finds cluster c absent already
                    X["swaps_remove"].append(rem)
        for mode in ["steady", "reloading"]:
            texts = slices_of(work, r, f"reload-{mode}")
            lat = dnsperf_latencies_us("\n".join(texts))
            lost = sum(int(dnsperf_summary(t)["lost"] or 0) for t in texts)
            if lat:
                per["rl_p50"][mode][r] = pct(lat, 50)
                per["rl_p99"][mode][r] = pct(lat, 99)
                per["rl_p999"][mode][r] = pct(lat, 99.9)
                per["rl_n"][mode][r] = len(lat)
                per["rl_lost"][mode][r] = lost
        a = raw[("meshdns", "reloads_applied")].get(r)
        if a is not None:
            per["rl_applied"]["meshdns"][r] = a
        # ---- DNS over TLS: misses to one cluster over UDP (u), TCP (p), DoT (t)
        by = defaultdict(list)
        for label, us, rcode, an in probe_lines(w(f"r{r}-tls.out")):
            if us is not None and rcode == 0 and an == 1:
                by[label].append(us)
            else:
                per["tls_bad"][label][r] = per["tls_bad"][label].get(r, 0) + 1
        for label, xs in by.items():
            xs.sort()
            per["tls_p50"][label][r] = pct(xs, 50)
            per["tls_p90"][label][r] = pct(xs, 90)
            per["tls_p99"][label][r] = pct(xs, 99)
            per["tls_n"][label][r] = len(xs)
        for tr in ["udp", "tcp", "dot", "dotunbound", "tcpunbound"]:
            lat = dnsperf_latencies_us(w(f"r{r}-direct-{tr}.out"))
            if lat:
                per["direct_p50"][tr][r] = pct(lat, 50)
                per["direct_p90"][tr][r] = pct(lat, 90)
                per["direct_n"][tr][r] = len(lat)
        hs = raw[("meshdns", "tls_handshakes")].get(r)
        if hs is not None and by.get("t"):
            per["tls_hs_per_1k"]["meshdns"][r] = hs * 1000.0 / len(by["t"])
        hs = raw[("meshdns", "tls_handshakes_unbound")].get(r)
        if hs is not None and by.get("k"):
            per["tls_hs_per_1k"]["unbound"][r] = hs * 1000.0 / len(by["k"])
        cs = raw[("meshdns", "tcp_connects")].get(r)
        if cs is not None and by.get("p"):
            per["tcp_conn_per_1k"]["meshdns"][r] = cs * 1000.0 / len(by["p"])
            per["tcp_connects"]["meshdns"][r] = cs
        for key in ["tls_rss_idle_kb", "tls_rss_open_kb"]:
            v = raw[("meshdns", key)].get(r)
            if v is not None:
                per[key]["meshdns"][r] = v / MIB
        for key in ["tls_handshakes_warmup", "tls_handshakes", "tls_stunnel_accepts"]:
            v = raw[("meshdns", key)].get(r)
            if v is not None:
                per[key]["meshdns"][r] = v
        # ---- threads: meshdns with 2 and 1 threads, unbound with 2, none pinned
        for s in THREAD_SERVERS:
            done = secs = 0.0
            for text in slices_of(work, r, f"thrqps-{s}"):
                q = dnsperf_summary(text)
                done += q["completed"] or 0
                secs += q["runtime"] or 0
            if secs:
                per["thr_qps"][s][r] = done / secs
            texts = slices_of(work, r, f"thrfixed-{s}")
            lat = dnsperf_latencies_us("\n".join(texts))
            answered = sum(dnsperf_summary(t)["completed"] or 0 for t in texts)
            for p in (50, 90, 99, 99.9):
                per[f"thr_p{p}"][s][r] = pct(lat, p)
            per["thr_lost"][s][r] = sum(dnsperf_summary(t)["lost"] or 0 for t in texts)
            ticks = raw[(s, "cpu_ticks")].get(r)
            if ticks is not None and answered:
                per["thr_cpu_us"][s][r] = ticks / os.sysconf("SC_CLK_TCK") * 1e6 / answered
            t = raw[(s, "threads")].get(r)
            if t is not None:
                per["thr_threads"][s][r] = t
        # ---- sizing: one replica's QPS, and its latency from 1,000 source addresses
        for s in SIZING_SERVERS:
            done = secs = 0.0
            for text in slices_of(work, r, f"szqps-{s}"):
                q = dnsperf_summary(text)
                done += q["completed"] or 0
                secs += q["runtime"] or 0
            if secs:
                per["sz_qps"][s][r] = done / secs
            ticks = raw[(s, "sz_cpu_ticks")].get(r)
            if ticks is not None and done:
                per["sz_cpu_us"][s][r] = ticks / os.sysconf("SC_CLK_TCK") * 1e6 / done
            lat, lost = [], 0
            for line in w(f"r{r}-szlat-{s}.out").splitlines():
                parts = line.split()
                if len(parts) != 2 or line.startswith("#"):
                    continue
                us, rcode = float(parts[0]), int(parts[1])
                if us < 0 or rcode != 0:
                    lost += 1
                else:
                    lat.append(us)
            lat.sort()
            if lat:
                for p in (50, 90, 99):
                    per[f"sz_p{p}"][s][r] = pct(lat, p)
            per["sz_lost"][s][r] = lost
        # ---- search: upstream queries per getaddrinfo, search-list answers on and off
        names = int(meta.get("search_names", "50"))
        for mode in ["on", "off"]:
            k, b = raw[(f"search-{mode}", "kube_queries")].get(r), raw[(f"search-{mode}", "cluster_queries")].get(r)
            if k is None or b is None:
                continue
            per["search_kube"][mode][r] = k / names
            per["search_cluster"][mode][r] = b / names
            per["search_all"][mode][r] = (k + b) / names
            per["search_ok"][mode][r] = raw[(f"search-{mode}", "lookups_ok")].get(r)
            secs = raw[(f"search-{mode}", "seconds")].get(r)
            if secs is not None:
                per["search_ms"][mode][r] = secs * 1000.0 / names
        # ---- outage: stale answers while the upstream is black-holed
        ev = events(w(f"r{r}-outage.events"))
        lines = probe_lines(w(f"r{r}-outage.out"))
        if lines and "query" in ev:
            lat = [us for _, us, rcode, an in lines]
            ok = sum(1 for _, us, rcode, an in lines if us is not None and rcode == 0 and an == 1)
            slow = [i for i, us in enumerate(lat) if us is None or us >= 50_000]
            first = slow[0] if slow else 0
            after = sorted(us for us in lat[first + 1:] if us is not None)
            per["out_first_ms"]["meshdns"][r] = (lat[first] or 1e6) / 1000.0
            per["out_slow"]["meshdns"][r] = len(slow)
            per["out_p50"]["meshdns"][r] = pct(after, 50)
            per["out_p99"]["meshdns"][r] = pct(after, 99)
            per["out_n"]["meshdns"][r] = len(lat)
            per["out_ok"]["meshdns"][r] = ok
            # Upstream queries per name in the first recheck period (30 s) after the first query.
            t_q = ev["query"] * 1000.0
            counts, total, health = defaultdict(int), defaultdict(int), defaultdict(int)
            for line in w(f"r{r}-hole.log").splitlines():
                parts = line.split()
                if len(parts) != 3:
                    continue
                t, name = float(parts[0]), parts[1]
                if name.startswith("o") and name.endswith(".bench.test"):
                    total[name] += 1
                    if t_q <= t < t_q + 30_000:
                        counts[name] += 1
                else:
                    health[f"{name} type {parts[2]}"] += 1
            names = int(meta.get("outage_names", "200"))
            cs = sorted(counts.get(f"o{i}.bench.test", 0) for i in range(names))
            per["out_q_med"]["meshdns"][r] = pct(cs, 50)
            per["out_q_max"]["meshdns"][r] = cs[-1] if cs else None
            span = (ev.get("end", 0) - ev.get("outage", 0)) or 1
            per["out_q_all"]["meshdns"][r] = sum(total.values()) / names
            per["out_span"]["meshdns"][r] = span
            X["outage_health"].append((r, dict(health), span))
        # ---- overload
        for c in OVERLOAD_CASES:
            ev = events(w(f"r{r}-ovl-{c}.events"))
            samples = []
            for line in w(f"r{r}-ovl-{c}.rss").splitlines():
                parts = line.split()
                if len(parts) == 3:
                    samples.append((float(parts[0]), int(parts[1]) / MIB, int(parts[2])))
            if not samples or "start" not in ev:
                continue
            t0, t1 = ev["start"], ev["end"]
            before = [m for t, m, _ in samples if t < t0]
            during = [(t, m, i) for t, m, i in samples if t0 <= t <= t1 + 10.05]
            if not during:
                continue
            peak = max(m for _, m, _ in during)
            later = [(t, m) for t, m, _ in samples if t1 - 0.1 < t <= t1 + 10.05]
            after = later[-1][1] if later else None
            under = next((max(0.0, t - t1) for t, m in later if m < 12.0 and all(m2 < 12.0 for t2, m2 in later if t2 >= t)), None)
            per[f"ovl_{c}_base"]["meshdns"][r] = before[-1] if before else None
            per[f"ovl_{c}_peak"]["meshdns"][r] = peak
            per[f"ovl_{c}_after"]["meshdns"][r] = after
            per[f"ovl_{c}_under"]["meshdns"][r] = under
            per[f"ovl_{c}_inflight"]["meshdns"][r] = max(i for _, _, i in during)
            if r == 1:
                X["ovl_series"][c] = [(t - t0, m) for t, m, _ in samples]
            mx = prom(w(f"r{r}-ovl-{c}.metrics"))
            for reason in DROP_REASONS:
                X["drops"][c][reason].append(mx.get(f'meshdns_dropped_total{{reason="{reason}"}}', 0))
            X["drops"][c]["answered"].append(sum(v for k, v in mx.items() if k.startswith("meshdns_requests_total{")))
            fl = w(f"r{r}-ovl-{c}.flood").strip()
            if fl:
                X["ovl_notes"][c].append(fl)
            if c == "b":
                per["ovl_b_upstream"]["meshdns"][r] = len(w(f"r{r}-ovl-b-hole.log").splitlines())
            if c == "c":
                fresh = probe_lines(w(f"r{r}-ovl-c-fresh.out"))
                per["ovl_c_fresh"]["meshdns"][r] = sum(1 for _, us, rc, _ in fresh if us is not None and rc == 0)
    # ---- idle: one window for the whole run
    begin = {ln.split()[0]: ln.split()[1:] for ln in w("idle-begin.txt").splitlines() if len(ln.split()) == 6}
    end = {ln.split()[0]: ln.split()[1:] for ln in w("idle-end.txt").splitlines() if len(ln.split()) == 6}
    secs = w("idle-seconds.txt").strip()
    for k in begin:
        if k in end and secs:
            b, e = [float(x) for x in begin[k]], [float(x) for x in end[k]]
            # Sums over the threads alive at each end: a thread that ended in the window takes
            # its counts with it, so a difference below zero means none (not fewer than none).
            X["idle"][k] = {"ticks": max(e[0] - b[0], 0), "ctxsw": max(e[1] - b[1], 0),
                            "cpu_ms": max(e[2] - b[2], 0) / 1e6,
                            "rss": e[3] / MIB, "threads": int(e[4]), "seconds": float(secs)}
    X["swaps_add"].sort()
    X["swaps_remove"].sort()
    return X


def loss_section(work, rounds, meta, raw):
    """The loss group (issue 30): the targets' rows and a table. Every round's queries of a case
    are pooled (500 a case a round); a timeout (1 s, the probe's) counts as 1 s and as a
    failure, like a SERVFAIL."""
    levels = [int(x) for x in meta.get("loss_levels", "1 5").split()]
    rtt = meta.get("loss_rtt_ms", "20")
    label = {"m": "meshdns", "u": "unbound", "g": "meshdns"}
    stats = {}  # (case, level, server) -> dict

    def pooled(case, level, want_an):
        got = defaultdict(lambda: {"lat": [], "servfail": 0, "timeout": 0, "short": 0, "n": 0})
        for r in range(1, rounds + 1):
            for lab, us, rcode, an in probe_lines(read(os.path.join(work, f"r{r}-loss-{case}-{level}.out"))):
                g = got[label.get(lab, lab)]
                g["n"] += 1
                g["lat"].append(1e6 if us is None else us)
                g["timeout"] += us is None
                g["servfail"] += us is not None and rcode == 2
                g["short"] += us is not None and rcode == 0 and an < want_an
        for g in got.values():
            g["lat"].sort()
        return got

    for level in levels:
        for case, want in (("route", 1), ("rtt", 1), ("gather", 9)):
            for server, g in pooled(case, level, want).items():
                stats[(case, level, server)] = g
        partial = 0
        for r in range(1, rounds + 1):
            a = raw[("meshdns", f"loss_partial0_{level}")].get(r)
            b = raw[("meshdns", f"loss_partial1_{level}")].get(r)
            if a is not None and b is not None:
                partial += b - a
        stats[("gather", level, "partial")] = partial

    def ms(us):
        return "—" if us is None else f"{us / 1000.0:,.1f}"

    def p(case, level, server, q):
        g = stats.get((case, level, server))
        return None if not g or not g["lat"] else pct(g["lat"], q)

    def failed(case, level, server):
        g = stats.get((case, level, server))
        return None if not g else g["servfail"] + g["timeout"]

    def ok(cond):
        if cond is None:
            return "no data"
        return "**met**" if cond else "**not met**"

    targets, lines = [], []
    for level in levels:
        for case, what in (("route", "cluster-route miss"), ("rtt", f"cluster-route miss, +{rtt} ms RTT")):
            m90, u90 = p(case, level, "meshdns", 90), p(case, level, "unbound", 90)
            m99, u99 = p(case, level, "meshdns", 99), p(case, level, "unbound", 99)
            fm, fu = failed(case, level, "meshdns"), failed(case, level, "unbound")
            n = (stats.get((case, level, "meshdns")) or {}).get("n", 0)
            met = None if None in (m90, u90, m99, u99, fm) else (m90 <= 2 * u90 and m99 <= u99 and fm == 0)
            targets.append(("loss", "30", f"{what} at {level} % loss each way: p90, p99, failures vs unbound over the same link",
                            "p90 ≤ 2× unbound's, p99 ≤ unbound's, no SERVFAIL",
                            f"p90 {ms(m90)} vs {ms(u90)} ms, p99 {ms(m99)} vs {ms(u99)} ms; SERVFAIL or timeout {fm} vs {fu} of {n}",
                            ok(met)))
        g99 = p("gather", level, "meshdns", 99)
        g = stats.get(("gather", level, "meshdns")) or {}
        part = stats.get(("gather", level, "partial"))
        fails = None if not g else g["servfail"] + g["timeout"]
        met = None if g99 is None or fails is None else (g99 <= 250_000 and part == 0 and g.get("short", 0) == 0 and fails == 0)
        targets.append(("loss", "30", f"gathered SRV over two lossy clusters at {level} % loss each way",
                        "0 partial, p99 ≤ 250 ms",
                        f"{part:g} partial (meshdns_gather_partial_total), {g.get('short', 0)} short of 9 targets, {fails} failed, of {g.get('n', 0)}; "
                        f"p50 {ms(p('gather', level, 'meshdns', 50))}, p90 {ms(p('gather', level, 'meshdns', 90))}, p99 {ms(g99)} ms",
                        ok(met)))
    lines.append("## Lost packets (issue 30)")
    lines.append("")
    lines.append(f"Peer links dropping a share of UDP datagrams each way (nftables `numgen random` on the peers' addresses, "
                 f"queries and replies); {meta.get('loss_steps', '500')} queries a case a round, {rounds} rounds pooled, "
                 "one query in flight, meshdns (cache off) and unbound (forwarding `cluster.local.` over the same link) taking turns; "
                 "a timeout is the probe's 1 s. Milliseconds. *Delayed*: the share of queries more than 5 ms slower "
                 "than the median, those a lost datagram cost a retransmission; at 5 % each way it is about 9.75 % "
                 "(1 − 0.95²) for any server, so a p90 lands on a retransmission or not by chance, whichever side of "
                 "10 % the share of that run falls.")
    lines.append("")
    lines.append("| case | loss | server | p50 | p90 | p99 | max | delayed | SERVFAIL | timeouts |")
    lines.append("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    for case, what in (("route", "cluster-route miss"), ("rtt", f"miss, +{rtt} ms RTT"), ("gather", "gathered SRV (a + 2 lossy)")):
        for level in levels:
            for server in ("meshdns", "unbound"):
                g = stats.get((case, level, server))
                if not g or not g["lat"]:
                    continue
                median = pct(g['lat'], 50)
                delayed = sum(1 for us in g['lat'] if us > median + 5000) / len(g['lat'])
                lines.append(f"| {what} | {level} % | {server} | {ms(median)} | {ms(pct(g['lat'], 90))} | "
                             f"{ms(pct(g['lat'], 99))} | {ms(g['lat'][-1])} | {100 * delayed:.1f} % | {g['servfail']} | {g['timeout']} |")
    lines.append("")
    return targets, lines


def slices_of(work, r, test):
    out, k = [], 1
    while os.path.exists(os.path.join(work, f"r{r}-{test}-{k}.out")):
        out.append(read(os.path.join(work, f"r{r}-{test}-{k}.out")))
        k += 1
    return out


def main():
    work, results, name = sys.argv[1:4]
    meta = {}
    for line in read(os.path.join(work, "meta.env")).splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            meta[k] = v
    rounds = int(meta.get("rounds", "1"))
    rate = int(meta.get("rate", "20000"))
    legs = [float(x) for x in meta.get("legs", "20 40 80").split()]
    clk = os.sysconf("SC_CLK_TCK")

    raw = defaultdict(dict)  # (server, metric) -> {round: value}
    for line in read(os.path.join(work, "raw.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[3] not in ("", None):
            try:
                d = raw[(parts[1], parts[2])]  # several records (one a slice) add up
                d[int(parts[0])] = d.get(int(parts[0]), 0.0) + float(parts[3])
            except ValueError:
                pass

    def f(r, test, server):
        return os.path.join(work, f"r{r}-{test}-{server}.out")

    def slices(r, test, server):
        """The texts of one round's slices of a timed test, in slice order."""
        return slices_of(work, r, f"{test}-{server}")

    per = defaultdict(lambda: defaultdict(dict))  # metric -> server -> round -> value
    lost = defaultdict(int)
    for r in range(1, rounds + 1):
        for s in SERVERS:
            done = secs = 0.0
            for text in slices(r, "qps", s):
                q = dnsperf_summary(text)
                done += q["completed"] or 0
                secs += q["runtime"] or 0
                lost[("qps", s)] += int(q["lost"] or 0)
            per["qps"][s][r] = done / secs if secs else None
            per["qps_done"][s][r] = done
            fx_texts = slices(r, "fixed", s)
            fx = {"completed": 0, "qps": None}
            for text in fx_texts:
                one = dnsperf_summary(text)
                fx["completed"] += one["completed"] or 0
                lost[("fixed", s)] += int(one["lost"] or 0)
            fx_text = "\n".join(fx_texts)
            ut, st = raw[(s, "cpu_user_ticks")].get(r), raw[(s, "cpu_sys_ticks")].get(r)
            if ut is not None and st is not None and fx["completed"]:
                per["cpu_us"][s][r] = (ut + st) / clk * 1e6 / fx["completed"]
                per["cpu_user_us"][s][r] = ut / clk * 1e6 / fx["completed"]
            lat = dnsperf_latencies_us(fx_text)
            for p in (50, 90, 99, 99.9):
                per[f"p{p}"][s][r] = pct(lat, p)
            for m in ("rss_idle_kb", "rss_10k_kb"):
                v = raw[(s, m)].get(r)
                per[m][s][r] = None if v is None else v / MIB
        # probe lines "LABEL LATENCY_US RCODE ANCOUNT"; the floor answers with no records.
        by = defaultdict(list)
        for line in read(os.path.join(work, f"r{r}-miss.out")).splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue
            label, us, rcode, an = parts[0], float(parts[1]), int(parts[2]), int(parts[3])
            if us < 0 or rcode != 0 or an != 1:
                lost[("miss", label)] += 1
                continue
            by[label].append(us)
        # In the cache-miss rows the floor is the relay (floor.c forwarding with no DNS work).
        # "fresh": the relay with a socket per query (RFC 5452's random source port, as meshdns).
        for s in ["direct", "meshdns", "unbound", "dnsmasq", "floor", "fresh"]:
            lat = sorted(by.get("relay" if s == "floor" else s, []))
            per["miss_p50"][s][r] = pct(lat, 50)
            per["miss_p90"][s][r] = pct(lat, 90)
            per["miss_n"][s][r] = len(lat)
        for s in ["meshdns", "unbound", "dnsmasq", "floor", "fresh"]:
            for q, added in (("miss_p50", "miss_add"), ("miss_p90", "miss_add90")):
                a, b = per[q][s].get(r), per[q]["direct"].get(r)
                per[added][s][r] = None if a is None or b is None else a - b
        for s in ["meshdns", "unbound", "dnsmasq", "floor"]:
            a, b = per["miss_add"][s].get(r), per["miss_add"]["floor"].get(r)
            per["miss_own"][s][r] = None if a is None or b is None else a - b

    # Gathered SRV: srvprobe lines "LABEL LATENCY_US RCODE ANCOUNT".
    gather_all = defaultdict(list)
    gather_bad = defaultdict(int)
    expect = {"slowest": 3, "gathered": 9}
    for r in range(1, rounds + 1):
        by = defaultdict(list)
        for line in read(os.path.join(work, f"r{r}-gather.out")).splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue
            label, us, rcode, an = parts[0], float(parts[1]), int(parts[2]), int(parts[3])
            if us < 0 or rcode != 0 or an != expect.get(label, an):
                gather_bad[label] += 1
                continue
            by[label].append(us / 1000.0)
        for label, xs in by.items():
            xs.sort()
            gather_all[label].extend(xs)
            per["g_p50"][label][r] = pct(xs, 50)
            per["g_p90"][label][r] = pct(xs, 90)
        a, b = per["g_p50"]["gathered"].get(r), per["g_p50"]["slowest"].get(r)
        per["g_add"]["gathered"][r] = None if a is None or b is None else a - b
    for xs in gather_all.values():
        xs.sort()

    M = {}  # metric -> server -> median over the rounds (filled below, with the new rows)

    def m(metric, server):
        return M.get(metric, {}).get(server)

    def rr(metric, a, b, r):
        x, y = per[metric][a].get(r), per[metric][b].get(r)
        return None if x is None or y in (None, 0) else x / y

    def rmed(metric, a, b):
        """Median over the rounds of a/b within each round: the servers of one round ran side by
        side, so their ratio is steadier than the ratio of two medians on a noisy machine."""
        return med([rr(metric, a, b, r) for r in range(1, rounds + 1)])

    # ------------------------------------------------------------------ targets
    X = new_rows(work, rounds, raw, per, meta)
    M = {m: {s: med(v.values()) for s, v in d.items()} for m, d in per.items()}
    groups = set(meta.get("groups", "hits,misses,gather").split(","))
    hit_qps_ratio_unbound = rmed("qps", "meshdns", "unbound")
    hit_qps_ratio_floor = rmed("qps", "meshdns", "floor")
    cpu_ratio = rmed("cpu_us", "meshdns", "unbound")
    p99_ratio = rmed("p99", "meshdns", "unbound")
    low_ratio = rmed("low_cpu_us", "meshdns", "unbound")
    low_rate = int(meta.get("low_rate", "200"))

    def spread(metric, a, b):
        xs = [rr(metric, a, b, r) for r in range(1, rounds + 1)]
        xs = [x for x in xs if x is not None]
        return f"rounds {min(xs):.2f}–{max(xs):.2f}; " if len(xs) > 1 else ""

    def rng(metric, s="meshdns", digits=1):
        """" (rounds LOW–HIGH)", or nothing with one round."""
        xs = [v for v in per[metric][s].values() if v is not None]
        return f" (rounds {fmt(min(xs), digits)}–{fmt(max(xs), digits)})" if len(xs) > 1 else ""

    g_add = m("g_add", "gathered")
    g_med = m("g_p50", "gathered")

    def verdict(ok):
        if ok is None:
            return "no data"
        return "**met**" if ok else "**not met**"

    def le(a, b):
        return None if a is None or b is None else a <= b

    def ge(a, b):
        return None if a is None or b is None else a >= b

    def ratio_target(group, issue, target, goal, metric, a, b, limit, unit, extra="", cmp=le):
        """A row whose goal is a ratio of two columns of one metric, measured within each round."""
        x = rmed(metric, a, b)
        return (group, issue, target, goal,
                f"{fr(x)} ({spread(metric, a, b)}{fmt(m(metric, a), 0, unit)} vs {fmt(m(metric, b), 0, unit)}{extra})",
                verdict(cmp(x, limit)))

    idle = X["idle"]
    ip, idr = idle.get("plain"), idle.get("configdir")
    idle_ok = None if not (ip and idr) else (idr["ticks"] <= ip["ticks"] and idr["ctxsw"] <= ip["ctxsw"])
    rl_ratio = rmed("rl_p99", "reloading", "steady")
    tls_ratio = rmed("tls_p50", "t", "u")
    swaps = X["swaps_add"]
    bin_bytes = int(meta.get("binary_bytes", "0") or 0)
    bin_kind = meta.get("binary_kind", "")
    ref_bytes = 2_723_424 if "musl" in bin_kind else 2_611_600

    targets = [
        # (group, issue, target, goal, measured, verdict)
        ("hits", "26", "cache-hit QPS vs unbound (1 thread)", "≥ 1.10×",
         f"{fr(hit_qps_ratio_unbound)} ({spread('qps', 'meshdns', 'unbound')}{fmt(m('qps', 'meshdns'))} vs {fmt(m('qps', 'unbound'))} qps)",
         verdict(ge(hit_qps_ratio_unbound, 1.10))),
        ("hits", "26", "cache-hit QPS vs the floor", "≥ 0.93×",
         f"{fr(hit_qps_ratio_floor)} ({spread('qps', 'meshdns', 'floor')}{fmt(m('qps', 'meshdns'))} vs {fmt(m('qps', 'floor'))} qps)",
         verdict(ge(hit_qps_ratio_floor, 0.93))),
        ("hits", "35", f"CPU time per query at {rate:,} qps", "≤ 1.00× unbound's",
         f"{fr(cpu_ratio)} ({spread('cpu_us', 'meshdns', 'unbound')}{fmt(m('cpu_us', 'meshdns'), 1, ' µs')} vs {fmt(m('cpu_us', 'unbound'), 1, ' µs')})",
         verdict(le(cpu_ratio, 1.00))),
    ]
    targets += [ratio_target("hits", "26", f"latency p{p:g} at {rate:,} qps", "≤ unbound's (≤ 1.00×)",
                             f"p{p}", "meshdns", "unbound", 1.0, " µs") for p in (90, 99, 99.9)]
    targets += [
        ratio_target("hits", "26", f"latency p99 at {rate:,} qps vs the floor", "≤ 1.10×", "p99", "meshdns", "floor", 1.10, " µs"),
        ("lowrate", "26", f"CPU time per query at {low_rate} qps (paced, cache hits)", "≤ 1.00× unbound's",
         f"{fr(low_ratio)} ({spread('low_cpu_us', 'meshdns', 'unbound')}{fmt(m('low_cpu_us', 'meshdns'), 1, ' µs')} vs {fmt(m('low_cpu_us', 'unbound'), 1, ' µs')}; "
         f"wake-ups per query {fmt(m('low_ctxsw', 'meshdns'), 2)} vs {fmt(m('low_ctxsw', 'unbound'), 2)})",
         verdict(le(low_ratio, 1.0))),
        ratio_target("misses", "35", "cache miss: latency added over asking the upstream directly, p50, vs the floor relay's", "≤ 1.30×",
                     "miss_add", "meshdns", "floor", 1.30, " µs",
                     f"; unbound adds {fmt(m('miss_add', 'unbound'), 0, ' µs')}; asked directly {fmt(m('miss_p50', 'direct'), 0, ' µs')}"),
        ratio_target("misses", "35", "cache miss: latency added over asking the upstream directly, p90, vs the floor relay's", "≤ 1.50×",
                     "miss_add90", "meshdns", "floor", 1.50, " µs",
                     f"; unbound adds {fmt(m('miss_add90', 'unbound'), 0, ' µs')}; asked directly {fmt(m('miss_p90', 'direct'), 0, ' µs')}"),
        ("misses", "35", "cache miss: latency added over asking the upstream directly, p50 and p90, vs a floor relay with a fresh socket per query (RFC 5452's random source port, as meshdns)", "reported",
         f"{fr(rmed('miss_add', 'meshdns', 'fresh'))} and {fr(rmed('miss_add90', 'meshdns', 'fresh'))} "
         f"({spread('miss_add', 'meshdns', 'fresh')}{fmt(m('miss_add', 'meshdns'), 0, ' µs')} vs {fmt(m('miss_add', 'fresh'), 0, ' µs')} at p50)",
         "reported"),
        ("hits", "26", "RSS idle", "≤ 6 MiB", f"{fmt(m('rss_idle_kb', 'meshdns'), 1, ' MiB')}{rng('rss_idle_kb')}",
         verdict(le(m("rss_idle_kb", "meshdns"), 6.0))),
        ("hits", "26", "RSS with 10,000 cached entries", "≤ 10 MiB", f"{fmt(m('rss_10k_kb', 'meshdns'), 1, ' MiB')}{rng('rss_10k_kb')}",
         verdict(le(m("rss_10k_kb", "meshdns"), 10.0))),
        ("gather", "10", f"gathered SRV, legs {'/'.join(f'{x:g}' for x in legs)} ms: median after the slowest leg", "≤ 2 ms",
         f"{fmt(g_add, 2, ' ms')} ({fmt(g_med, 1)} ms vs {fmt(m('g_p50', 'slowest'), 1)} ms for the slowest leg asked directly; sum of legs {sum(legs):g} ms)",
         verdict(le(g_add, 2.0))),
        ("gather", "26", f"gathered SRV, 3 × {meta.get('big_targets', '60')} targets (legs over TCP once the first answer came truncated): CPU per answer", "≤ 800 µs",
         f"{fmt(m('big_cpu_us', 'meshdns'), 0, ' µs')}{rng('big_cpu_us', digits=0)}",
         verdict(le(m("big_cpu_us", "meshdns"), 800.0))),
        ("gather", "26", f"gathered SRV, 3 × {meta.get('big_targets', '60')} targets: median over the slowest leg", "≤ 300 µs",
         f"{fmt(m('big_over', 'meshdns'), 0, ' µs')}{rng('big_over', digits=0)} ({fmt(m('big_p50', 'meshdns'), 0)} µs for the gathered answer)",
         verdict(le(m("big_over", "meshdns"), 300.0))),
    ]
    for c, desc in OVERLOAD_CASES.items():
        targets.append(("overload", "13", f"peak RSS, {desc}", "≤ 24 MiB",
                        f"{fmt(m(f'ovl_{c}_peak', 'meshdns'), 1, ' MiB')}{rng(f'ovl_{c}_peak')}",
                        verdict(le(m(f"ovl_{c}_peak", "meshdns"), 24.0))))
    for c, desc in OVERLOAD_CASES.items():
        targets.append(("overload", "13", f"RSS 10 s after {desc[:3]}", "≤ 12 MiB",
                        f"{fmt(m(f'ovl_{c}_after', 'meshdns'), 1, ' MiB')}{rng(f'ovl_{c}_after')}",
                        verdict(le(m(f"ovl_{c}_after", "meshdns"), 12.0))))
    targets += [
        ("outage", "13", "stale answers during an outage, after the first failure: p50", "≤ 1 ms",
         f"{fmt(m('out_p50', 'meshdns'), 0, ' µs')} (p99 {fmt(m('out_p99', 'meshdns'), 0, ' µs')}; the first failure took {fmt(m('out_first_ms', 'meshdns'), 0, ' ms')}, "
         f"{fmt(m('out_slow', 'meshdns'))} queries ≥ 50 ms in all)",
         verdict(le(None if m("out_p50", "meshdns") is None else m("out_p50", "meshdns") / 1000.0, 1.0))),
        ("outage", "13", "upstream queries per name per 30 s recheck period (at the black hole)", "≤ 2",
         f"{fmt(m('out_q_med', 'meshdns'), 1)} at the median, {fmt(m('out_q_max', 'meshdns'))} at most (first 30 s; {fmt(m('out_q_all', 'meshdns'), 1)} per name over the whole {fmt(m('out_span', 'meshdns'), 0)} s outage)",
         verdict(le(m("out_q_max", "meshdns"), 2))),
        ("reload", "15", f"idle over {fmt(ip['seconds'] if ip else None, 0)} s with MESHDNS_CONFIG_DIR: CPU ticks, wake-ups", "no more than without",
         "—" if not (ip and idr) else
         f"{idr['ticks']:.0f} ticks, {idr['ctxsw']:.0f} context switches ({idr['cpu_ms']:.1f} ms CPU) vs {ip['ticks']:.0f} ticks, {ip['ctxsw']:.0f} without",
         verdict(idle_ok)),
        ("reload", "15", "kubelet-style `..data` swap adding a cluster → the new route answers (median)", "reported",
         f"{fmt(pct(swaps, 50), 0, ' ms')} ({len(swaps)} swaps, {fmt(swaps[0] if swaps else None, 0)}–{fmt(swaps[-1] if swaps else None, 0)} ms)", "reported"),
        ("reload", "35", "latency p99 during reloads vs steady state", "≤ 1.20×",
         f"{fr(rl_ratio)} ({spread('rl_p99', 'reloading', 'steady')}{fmt(m('rl_p99', 'reloading'), 0, ' µs')} vs {fmt(m('rl_p99', 'steady'), 0, ' µs')} at {int(meta.get('reload_rate', '5000')):,} qps)",
         verdict(le(rl_ratio, 1.2))),
        ("tls", "16", "cache miss to a cluster over DoT vs plain UDP, connection open (median)", "≤ 1.50×",
         f"{fr(tls_ratio)} ({spread('tls_p50', 't', 'u')}{fmt(m('tls_p50', 't'), 0, ' µs')} vs {fmt(m('tls_p50', 'u'), 0, ' µs')}; TCP {fmt(m('tls_p50', 'p'), 0, ' µs')}; "
         f"without meshdns, DoT through stunnel vs UDP: {fr(rmed('direct_p50', 'dot', 'udp'))}; meshdns over the path asked directly: "
         f"UDP {fmt(sub(m('tls_p50', 'u'), m('direct_p50', 'udp')), 0, ' µs')}, DoT {fmt(sub(m('tls_p50', 't'), m('direct_p50', 'dot')), 0, ' µs')})",
         verdict(le(tls_ratio, 1.5))),
        ("tls", "16", "TLS handshakes per 1,000 misses after warm-up", "≤ 1",
         f"{fmt(m('tls_hs_per_1k', 'meshdns'), 2)} ({fmt(m('tls_handshakes', 'meshdns'))} in {fmt(m('tls_n', 't'))} DoT misses; warm-up {fmt(m('tls_handshakes_warmup', 'meshdns'))})",
         verdict(le(m("tls_hs_per_1k", "meshdns"), 1.0))),
        ("tls", "16", "RSS idle with a DoT cluster configured", "≤ 8 MiB",
         f"{fmt(m('tls_rss_idle_kb', 'meshdns'), 1, ' MiB')}{rng('tls_rss_idle_kb')}; with the connection open, after the misses: {fmt(m('tls_rss_open_kb', 'meshdns'), 1, ' MiB')}",
         verdict(le(m("tls_rss_idle_kb", "meshdns"), 8.0))),
        ratio_target("tls", "26", "cache miss to a cluster over transport=tcp vs the same miss over UDP (median)", "≤ 1.15×",
                     "tls_p50", "p", "u", 1.15, " µs",
                     f"; without meshdns, TCP over one kept connection vs UDP: {fr(rmed('direct_p50', 'tcp', 'udp'))}"),
        ("tls", "26", "TCP connects per 1,000 misses over transport=tcp after warm-up", "≤ 1",
         f"{fmt(m('tcp_conn_per_1k', 'meshdns'), 2)} ({fmt(m('tcp_connects', 'meshdns'))} in {fmt(m('tls_n', 'p'))} TCP misses; "
         "meshdns_upstream_connections_total)",
         verdict(le(m("tcp_conn_per_1k", "meshdns"), 1.0))),
        ratio_target("tls", "35", "DoT miss, unbound terminating TLS itself (no second hop), vs a TCP miss to the same unbound (median)", "≤ 1.15×",
                     "tls_p50", "k", "q", 1.15, " µs",
                     f"; vs the TCP miss to the NSD: {fr(rmed('tls_p50', 'k', 'p'))}; without meshdns, unbound's own DoT vs its TCP: {fr(rmed('direct_p50', 'dotunbound', 'tcpunbound'))}"),
        ratio_target("threads", "25", "cache-hit QPS, MESHDNS_THREADS=2 vs unbound num-threads: 2 (none pinned)", "≥ 1.00×",
                     "thr_qps", "meshdns-t2", "unbound-t2", 1.0, " qps",
                     f"; MESHDNS_THREADS=1: {fmt(m('thr_qps', 'meshdns-t1'))} qps, {fr(rmed('thr_qps', 'meshdns-t1', 'unbound-t2'))}", cmp=ge),
        ratio_target("threads", "25", f"latency p99 at {rate:,} qps, MESHDNS_THREADS=2 vs unbound num-threads: 2", "≤ 1.00×",
                     "thr_p99", "meshdns-t2", "unbound-t2", 1.0, " µs", f"; MESHDNS_THREADS=1: {fmt(m('thr_p99', 'meshdns-t1'), 0, ' µs')}"),
        ("search", "24", f"upstream queries per getaddrinfo of a cluster name (search list, ndots:5), with the search-list answers", "≤ 2 (A and AAAA of the name)",
         f"{fmt(m('search_all', 'on'), 1)} ({fmt(m('search_kube', 'on'), 1)} to kube-dns, {fmt(m('search_cluster', 'on'), 1)} to the cluster); "
         f"without them (0.1.x): {fmt(m('search_all', 'off'), 1)} ({fmt(m('search_kube', 'off'), 1)} to kube-dns, {fmt(m('search_cluster', 'off'), 1)} to the cluster)",
         verdict(le(m("search_all", "on"), 2.0))),
        ("tls", "16", "release binary size", "reported",
         f"{bin_bytes:,} bytes, {bin_kind} ({fr(bin_bytes / ref_bytes if bin_bytes else None)} 0.1.0's {ref_bytes:,})", "reported"),
    ]
    loss_targets, loss_lines = loss_section(work, rounds, meta, raw)
    targets += loss_targets
    targets = [t[1:] for t in targets if t[0] in groups]

    # ------------------------------------------------------------------ markdown
    L = []
    L.append("# meshdns benchmark")
    L.append("")
    L.append(f"- date: {meta.get('date', '?')}; elapsed {meta.get('elapsed', '?')} s")
    L.append(f"- machine: {meta.get('machine', '?')}; load average {meta.get('load', '?')}")
    L.append(
        f"- BENCH_SECONDS={meta.get('seconds')} (slices of {meta.get('slice')} s), BENCH_ROUNDS={rounds} (medians of the rounds), "
        f"fixed rate {rate:,} qps, nice {meta.get('nice')}, {meta.get('pinning')}"
    )
    L.append(f"- meshdns: {meta.get('meshdns', '?')}, {meta.get('build', '?')}")
    L.append(
        f"- unbound {meta.get('unbound', '?')} (1 thread, iterator only), dnsmasq {meta.get('dnsmasq', '?')}, "
        f"dnsperf {meta.get('dnsperf', '?')}, stand-in kube-dns NSD {meta.get('nsd', '?')}"
    )
    L.append("")
    L.append("## Targets (issues 10, 13, 15, 16, 19, 24, 25, 26, 30, 35)")
    L.append("")
    L.append("| issue | target | goal | measured | |")
    L.append("|--:|---|---|---|---|")
    for t in targets:
        L.append("| " + " | ".join(t) + " |")
    L.append("")
    if "loss" in groups:
        L.extend(loss_lines)
    mark = len(L)
    L.append(f"## Measurements (median of {rounds} rounds)")
    L.append("")
    L.append("Values are medians over the rounds; a ratio is the median over the rounds of that round's ratio.")
    L.append("")
    L.append("| measure | meshdns | unbound | dnsmasq | floor | meshdns ÷ unbound | meshdns ÷ floor |")
    L.append("|---|--:|--:|--:|--:|--:|--:|")

    def row(label, metric, digits=0, servers=SERVERS, floor_ratio=True):
        vals = [m(metric, s) if s in servers else None for s in SERVERS]
        cells = [fmt(v, digits) for v in vals]
        ru = rmed(metric, "meshdns", "unbound") if "unbound" in servers else None
        rf = rmed(metric, "meshdns", "floor") if floor_ratio and "floor" in servers else None
        L.append(f"| {label} | " + " | ".join(cells) + f" | {fr(ru)} | {fr(rf)} |")

    row("cache-hit QPS (dnsperf, 4 sockets × 200 in flight)", "qps")
    row(f"CPU time per query at {rate:,} qps (µs, utime+stime)", "cpu_us", 1)
    row("… of which user time (µs)", "cpu_user_us", 1)
    row(f"latency p50 at {rate:,} qps (µs)", "p50")
    row(f"latency p90 at {rate:,} qps (µs)", "p90")
    row(f"latency p99 at {rate:,} qps (µs)", "p99")
    row(f"latency p99.9 at {rate:,} qps (µs)", "p99.9")
    row("RSS idle (MiB)", "rss_idle_kb", 1)
    row("RSS with 10,000 cached names (MiB)", "rss_10k_kb", 1)
    row("cache miss, one at a time: latency p50 (µs; floor: the relay)", "miss_p50")
    row("cache miss, one at a time: latency p90 (µs; floor: the relay)", "miss_p90")
    row("cache miss: added over asking the upstream directly, p50 (µs)", "miss_add")
    L.append(
        "| … beyond what the floor relay adds (µs) | "
        + " | ".join(fmt(m("miss_own", s)) if s != "floor" else "0" for s in SERVERS)
        + " | | |"
    )
    L.append("")
    L.append(
        f"Asking the stand-in kube-dns directly, one query at a time: p50 {fmt(m('miss_p50', 'direct'))} µs, "
        f"p90 {fmt(m('miss_p90', 'direct'))} µs ({fmt(m('miss_n', 'direct'))} queries a round). In the "
        "cache-miss rows the floor is `floor.c` as a relay: it passes each query to the stand-in and each "
        "reply back with no DNS work, no cache and no checks, so what it adds is the cost of one more hop "
        "on this machine, which no forwarder avoids."
    )
    L.append("")
    if not groups & {"hits", "misses"}:
        del L[mark:]
    mark = len(L)
    L.append(f"## Gathered SRV (three clusters, legs delayed {'/'.join(f'{x:g}' for x in legs)} ms)")
    L.append("")
    L.append("| | median (ms) | p90 (ms) | p99, all rounds (ms) | answers |")
    L.append("|---|--:|--:|--:|--:|")
    for label, desc in [("slowest", f"slowest leg ({legs[-1]:g} ms) asked directly through its proxy"),
                        ("gathered", "meshdns, `_mongodb._tcp.mongo.db.svc.distributed.local SRV`, cache off")]:
        xs = gather_all.get(label, [])
        L.append(
            f"| {desc} | {fmt(m('g_p50', label), 2)} | {fmt(m('g_p90', label), 2)} | {fmt(pct(xs, 99), 2)} | "
            f"{len(xs)} ok, {gather_bad.get(label, 0)} bad |"
        )
    L.append(f"| max of the legs / sum of the legs (nominal) | {max(legs):g} / {sum(legs):g} | | | |")
    L.append("")

    if "gather" not in groups:
        del L[mark:]

    # ------------------------------------------------------------------ the new groups' sections
    def cell(metric, s="meshdns", digits=0):
        return fmt(m(metric, s), digits)

    if "lowrate" in groups:
        L.append(f"## CPU at a pod's rate (issues 19 and 26): {low_rate} qps paced, cache hits, {meta.get('low_seconds', '?')} s in all")
        L.append("")
        L.append("| | meshdns | unbound | dnsmasq | meshdns ÷ unbound |")
        L.append("|---|--:|--:|--:|--:|")
        for label, metric, d in [("CPU time per query (µs, schedstat of every thread)", "low_cpu_us", 1),
                                 ("wake-ups per query (context switches of every thread)", "low_ctxsw", 2),
                                 ("answers a second", "low_qps", 0)]:
            L.append(f"| {label} | " + " | ".join(fmt(m(metric, s), d) for s in ["meshdns", "unbound", "dnsmasq"])
                     + f" | {fr(rmed(metric, 'meshdns', 'unbound'))} |")
        L.append("")
        L.append("The three servers run side by side, each asked by its own dnsperf (`-Q` pacing, one socket); "
                 "CPU time is the sum of `/proc/PID/task/*/schedstat`'s first field over the run.")
        L.append("")
    if "gather" in groups:
        bt = meta.get("big_targets", "60")
        L.append(f"## Gathered SRV of 3 clusters × {bt} targets (issues 19 and 26; no peer does this)")
        L.append("")
        L.append("| median (µs) | p90 (µs) | median over the slowest leg of the same step (µs) | CPU per answer (µs) | wake-ups per answer | answers |")
        L.append("|--:|--:|--:|--:|--:|--:|")
        L.append(f"| {cell('big_p50')} | {cell('big_p90')} | {cell('big_over')} | {cell('big_cpu_us')} | {cell('big_ctxsw', digits=1)} | "
                 f"{fmt(sum(per['big_n']['meshdns'].values()))} ok, {fmt(sum(per['big_bad']['meshdns'].values()))} bad |")
        L.append("")
        L.append(f"`_big._tcp.big.db.svc.distributed.local SRV` of a meshdns with the cache off and three clusters whose NSDs hold "
                 f"{bt} SRV records each (too large for 1,232 bytes: each leg is truncated over UDP and asked again over TCP, "
                 "and meshdns, remembering it, asks every later one over TCP at once; "
                 "the client, bench/probe.c, does the same with meshdns's 180-target answer). Each step asks the three legs "
                 "directly (UDP, then TCP), then meshdns; the figure over the slowest leg is the median of the per-step differences.")
        L.append("")
    if "reload" in groups:
        L.append("## Live configuration (issue 15)")
        L.append("")
        L.append("| idle meshdns | CPU ticks | context switches | CPU (ms, schedstat) | RSS (MiB) | threads |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for k, desc in [("plain", "environment only"), ("configdir", "MESHDNS_CONFIG_DIR (kubelet layout, not touched)"),
                        ("dot", "a DoT cluster configured (TLS files watched)")]:
            d = idle.get(k)
            if d:
                L.append(f"| {desc} | {d['ticks']:.0f} | {d['ctxsw']:.0f} | {d['cpu_ms']:.1f} | {d['rss']:.1f} | {d['threads']} |")
        if ip:
            L.append("")
            L.append(f"Over {ip['seconds']:.0f} s, from 2 s after each started, while the rounds ran (nothing asked them; "
                     "an idle process gets no CPU time from others' load).")
        L.append("")
        L.append(f"Swap → new cluster answering: median {fmt(pct(swaps, 50), 0)} ms over {len(swaps)} swaps "
                 f"(min {fmt(swaps[0] if swaps else None, 0)}, max {fmt(swaps[-1] if swaps else None, 0)}); removal → the removed "
                 f"cluster's cached name no longer answered: median {fmt(pct(X['swaps_remove'], 50), 0)} ms. meshdns waits for "
                 "200 ms of quiet after an event before it reads the directory (src/reload.rs SETTLE).")
        L.append("")
        L.append("| queries at a fixed rate | p50 (µs) | p99 (µs) | p99.9 (µs) | answers | lost |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for mode, desc in [("steady", "steady state"), ("reloading", "while the directory is swapped every 0.25 s")]:
            L.append(f"| {desc} | {cell('rl_p50', mode)} | {cell('rl_p99', mode)} | {cell('rl_p999', mode)} | "
                     f"{fmt(sum(per['rl_n'][mode].values()))} | {fmt(sum(per['rl_lost'][mode].values()))} |")
        L.append("")
        L.append(f"Reloads applied while swapping: {fmt(sum(per['rl_applied']['meshdns'].values()))} in all. The names asked "
                 "(pass-through and cluster a) are cache hits whose routes the swaps do not change; the slices alternate.")
        L.append("")
    if "tls" in groups:
        L.append("## TCP and DNS over TLS (issues 16 and 26)")
        L.append("")
        L.append("| cache miss to one cluster, one at a time | p50 (µs) | p90 (µs) | p99 (µs) | answers | ÷ UDP (p50) |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for lab, desc in [("u", "UDP"), ("p", "TCP (transport=tcp)"), ("t", "DoT through stunnel (mutual TLS)"),
                          ("k", "DoT to unbound terminating TLS itself (no second hop)"),
                          ("q", "TCP to the same unbound (transport=tcp)")]:
            L.append(f"| {desc} | {cell('tls_p50', lab)} | {cell('tls_p90', lab)} | {cell('tls_p99', lab)} | "
                     f"{fmt(sum(per['tls_n'][lab].values()))} | {fr(rmed('tls_p50', lab, 'u'))} |")
        for tr, desc in [("udp", "UDP to the NSD"), ("tcp", "TCP to the NSD, one kept connection"), ("dot", "DoT through stunnel to the NSD, one kept connection"),
                         ("dotunbound", "DoT to unbound, one kept connection"),
                         ("tcpunbound", "TCP to that unbound, one kept connection")]:
            L.append(f"| without meshdns: dnsperf directly, {desc} | {cell('direct_p50', tr)} | {cell('direct_p90', tr)} | | "
                     f"{fmt(sum(per['direct_n'][tr].values()))} | {fr(rmed('direct_p50', tr, 'udp'))} |")
        L.append("")
        L.append(f"One meshdns with five clusters: `u` over UDP, `p` over TCP and `t` over DoT through stunnel to one NSD, and `k` over DoT "
                 "to unbound, which terminates TLS itself and answers the same names from its own data (`local-data`; the "
                 "`dotunbound` row without meshdns asks it directly), `q` over plain TCP to that unbound. `u`, `p` and `t`: stunnel "
                 f"{meta.get('stunnel', '')} (`verify = 2`, client certificate required; certificates made with openssl at bench time), "
                 "which passes each connection's queries to the NSD over TCP. Each name is asked as `hN.mongo.db.cluster.u`, `.p` "
                 "`.t`, `.k` and `.q` in turn (five distinct misses). TCP connects to `p` (meshdns_upstream_connections_total) during the "
                 f"measured misses: {fmt(sum(per['tcp_connects']['meshdns'].values()))} in all rounds, after a warm-up that opened the "
                 "connection. TLS handshakes (meshdns_upstream_tls_handshakes_total): "
                 f"{fmt(sum(per['tls_handshakes_warmup']['meshdns'].values()))} during the warm-up, "
                 f"{fmt(sum(per['tls_handshakes']['meshdns'].values()))} during the measured misses; stunnel accepted "
                 f"{fmt(sum(per['tls_stunnel_accepts']['meshdns'].values()))} connections then. RSS with DoT configured: "
                 f"{cell('tls_rss_idle_kb', digits=1)} MiB idle, {cell('tls_rss_open_kb', digits=1)} MiB after the misses (connection "
                 f"open, ~{fmt(m('tls_n', 't'))} × 3 names cached). Binary: {bin_bytes:,} bytes ({bin_kind}); 0.1.0 without TLS: "
                 "2,611,600 bytes (glibc), 2,723,424 (musl). The `without meshdns` rows are dnsperf with one query in flight, "
                 "which sends only a few dozen queries a second that way: their answers column shows how few, so read them as "
                 "orders of magnitude.")
        L.append("")
    if "threads" in groups:
        L.append("## Two threads (issue 25): meshdns MESHDNS_THREADS=2 and =1, unbound num-threads: 2")
        L.append("")
        L.append("| | meshdns, 2 threads | unbound, 2 threads | meshdns, 1 thread | meshdns 2 ÷ unbound 2 | meshdns 1 ÷ unbound 2 |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for label, metric, d in [("cache-hit QPS (dnsperf, 4 sockets × 200 in flight)", "thr_qps", 0),
                                 (f"CPU time per query at {rate:,} qps (µs, utime+stime)", "thr_cpu_us", 1),
                                 (f"latency p50 at {rate:,} qps (µs)", "thr_p50", 0),
                                 (f"latency p90 at {rate:,} qps (µs)", "thr_p90", 0),
                                 (f"latency p99 at {rate:,} qps (µs)", "thr_p99", 0),
                                 (f"latency p99.9 at {rate:,} qps (µs)", "thr_p99.9", 0),
                                 ("threads of the process", "thr_threads", 0)]:
            L.append(f"| {label} | " + " | ".join(fmt(m(metric, s), d) for s in THREAD_SERVERS)
                     + f" | {fr(rmed(metric, 'meshdns-t2', 'unbound-t2'))} | {fr(rmed(metric, 'meshdns-t1', 'unbound-t2'))} |")
        L.append("")
        lost_thr = {s: sum(per["thr_lost"][s].values()) for s in THREAD_SERVERS}
        L.append("The same 1,000 hot names as the cache-hit rows, each server filled first; the timed runs in slices, the three "
                 "servers taking turns. With two threads a server cannot have a core to itself on a two-core machine, so here neither "
                 f"the servers nor dnsperf are pinned: the load generator shares the cores with the server it measures "
                 f"({meta.get('machine', '?').split(',')[0]}). "
                 "unbound runs with `so-reuseport: yes` (a socket per thread). Queries dnsperf counted as lost at the fixed rate: "
                 + ", ".join(f"{s} {fmt(v)}" for s, v in lost_thr.items()) + ".")
        L.append("")
    if "sizing" in groups:
        sz_rate = int(meta.get("sizing_rate", "2000"))
        L.append("## Sizing the cluster-level mode: one replica")
        L.append("")
        L.append("| | 1 thread, hits | 2 threads, hits | 1 thread, misses | 2 threads, misses |")
        L.append("|---|--:|--:|--:|--:|")
        for label, metric, d in [("QPS (dnsperf, 4 sockets, up to 200 in flight)", "sz_qps", 0),
                                 ("CPU time per query at that load (µs, utime+stime, every thread)", "sz_cpu_us", 1),
                                 (f"latency p50 at {sz_rate:,} qps from 1,000 source addresses (µs)", "sz_p50", 0),
                                 (f"latency p90 at {sz_rate:,} qps from 1,000 source addresses (µs)", "sz_p90", 0),
                                 (f"latency p99 at {sz_rate:,} qps from 1,000 source addresses (µs)", "sz_p99", 0)]:
            L.append(f"| {label} | " + " | ".join(fmt(m(metric, s), d) for s in SIZING_SERVERS) + " |")
        lost_sz = {s: sum(per["sz_lost"][s].values()) for s in SIZING_SERVERS}
        L.append("")
        L.append("Misses: the cache off (`MESHDNS_CACHE_SIZE=0`), so every query is asked of the stand-in kube-dns (NSD, on "
                 "CPU 0), which is what a 5 s TTL makes of a name asked less often than every 5 s. Neither meshdns nor the load "
                 "generators are pinned: on this machine the load generator takes a share of the same cores, so the QPS rows are a "
                 "floor for a node whose cores serve meshdns alone. The latency runs: bench/sources.py, one UDP socket on each of "
                 "1,000 addresses of 127.0.0.0/8, paced. Queries unanswered within a second or failed: "
                 + ", ".join(f"{s} {fmt(v)}" for s, v in lost_sz.items()) + ". docs/design.md (\"Cluster-level mode\") "
                 "turns these rows into replicas.")
        L.append("")
    if "search" in groups:
        n = meta.get("search_names", "50")
        L.append("## Search-list expansions (issue 24): upstream queries per getaddrinfo")
        L.append("")
        L.append("| meshdns | to kube-dns | to the cluster | upstream queries per getaddrinfo | ms per getent (process start included) | lookups answered |")
        L.append("|---|--:|--:|--:|--:|--:|")
        for mode, desc in [("off", "search-list answers off (its resolv.conf has no search line; what 0.1.x did)"),
                           ("on", "search-list answers on (the pod's resolv.conf)")]:
            L.append(f"| {desc} | {cell('search_kube', mode, 1)} | {cell('search_cluster', mode, 1)} | {cell('search_all', mode, 1)} | "
                     f"{cell('search_ms', mode, 1)} | {fmt(sum(v or 0 for v in per['search_ok'][mode].values()))} of {int(n) * rounds} |")
        L.append("")
        L.append(f"`getent ahosts hN.mongo.db.cluster.b` (glibc getaddrinfo, AF_UNSPEC), {n} distinct names per round and per meshdns, "
                 "in a mount namespace whose resolv.conf says `search " + meta.get("search_list", "?") + "`, `options ndots:5` and "
                 "the meshdns under test. The name has 4 dots, so glibc asks A and AAAA of each of the three expansions before "
                 "the name itself. The names are distinct, so no cache hides a query; the queries are counted at the two NSDs "
                 "(kube-dns: the zone cluster.local of cluster 1; cluster b: that of cluster 2) with `nsd-control stats_noreset`.")
        L.append("")
    if "outage" in groups:
        L.append("## Outage with stale answers at hand (issue 13)")
        L.append("")
        L.append("| round | first failure (ms) | queries ≥ 50 ms | p50 after it (µs) | p99 after it (µs) | queries | upstream queries per name, first 30 s: median / max | per name, whole outage (s) |")
        L.append("|--:|--:|--:|--:|--:|--:|--:|--:|")
        for r in range(1, rounds + 1):
            L.append(f"| {r} | {fmt(per['out_first_ms']['meshdns'].get(r))} | {fmt(per['out_slow']['meshdns'].get(r))} | "
                     f"{fmt(per['out_p50']['meshdns'].get(r))} | {fmt(per['out_p99']['meshdns'].get(r))} | "
                     f"{fmt(per['out_n']['meshdns'].get(r))} | {fmt(per['out_q_med']['meshdns'].get(r), 1)} / {fmt(per['out_q_max']['meshdns'].get(r))} | "
                     f"{fmt(per['out_q_all']['meshdns'].get(r), 1)} ({fmt(per['out_span']['meshdns'].get(r))}) |")
        L.append("")
        health = X["outage_health"]
        hs = "; ".join(f"round {r}: " + ", ".join(f"{v} × `{k}`" for k, v in sorted(h.items())) for r, h, _ in health if h)
        L.append(f"{meta.get('outage_names', '200')} names with a TTL of 2 s (MESHDNS_CACHE_MAX_TTL=2s) are cached through bench/blackhole.c, "
                 "which then drops everything (read, never answered); 2.5 s later every name has expired and the probe asks them "
                 f"in turn, one at a time with 0.5 ms between queries, for {meta.get('outage_seconds', '?')} s. \"After the first failure\": "
                 "every query after the first one that took 50 ms or more. Other queries the black hole saw (health probes): "
                 f"{hs or 'none'}.")
        L.append("")
    if "overload" in groups:
        L.append("## Overload and memory (issue 13), default settings")
        L.append("")
        L.append("| flood | RSS before (MiB) | peak (MiB) | 10 s after (MiB) | under 12 MiB again after (s) | in-flight peak | meshdns_dropped_total{reason} (median) | answered (median) |")
        L.append("|---|--:|--:|--:|--:|--:|---|--:|")
        for c, desc in OVERLOAD_CASES.items():
            dr = ", ".join(f"{k} {fmt(med(v))}" for k, v in X["drops"][c].items() if k != "answered" and med(v))
            under = per[f"ovl_{c}_under"]["meshdns"]
            never = sum(1 for r in range(1, rounds + 1) if r in per[f"ovl_{c}_peak"]["meshdns"] and under.get(r) is None)
            L.append(f"| {desc} | {cell(f'ovl_{c}_base', digits=1)} | {cell(f'ovl_{c}_peak', digits=1)} (max {fmt(max(per[f'ovl_{c}_peak']['meshdns'].values(), default=None), 1)}) | "
                     f"{cell(f'ovl_{c}_after', digits=1)} | {cell(f'ovl_{c}_under', digits=1)}{f' (not within 10 s in {never} of {rounds} rounds)' if never else ''} | "
                     f"{cell(f'ovl_{c}_inflight')} | {dr or '—'} | {fmt(med(X['drops'][c]['answered']))} |")
        L.append("")
        notes = {c: X["ovl_notes"][c][0] for c in OVERLOAD_CASES if X["ovl_notes"][c]}
        L.append(
            "A fresh meshdns for each flood (MESHDNS_UPSTREAMS and the listen addresses only), VmRSS and meshdns_inflight sampled "
            "every 100 ms (bench/sampler.py). (a) bench/flood.c at "
            f"{int(meta.get('flood_rate', '20000')):,}/s: random bytes, queries cut short, wrong section counts, labels past the end, "
            "pointer loops, responses, and queries for random names (forwarded to the live stand-in); "
            f"flood said: `{notes.get('a', '?')}`. (b) 4,000/s for 10 s, every name new, the upstream bench/blackhole.c dropping "
            f"everything; it received {cell('ovl_b_upstream')} queries (median); flood said: `{notes.get('b', '?')}`. "
            "(c) 300 connections (44 over meshdns's cap of 256 are closed at once), each sending 2,000 pipelined cache-hit "
            "queries with a receive buffer as small as the kernel allows and never reading, held 8 s, then closed; "
            f"flood said: `{notes.get('c', '?')}`; {cell('ovl_c_fresh')} of 50 fresh UDP misses sent meanwhile were answered (median).")
        L.append("")

    mark = len(L)
    # Per-round record, so the spread is visible.
    L.append("## Per round")
    L.append("")
    L.append("| round | QPS mesh / unbound / dnsmasq / floor | mesh÷unbound, mesh÷floor | CPU µs/q mesh / unbound | RSS idle / 10k mesh (MiB) | miss added mesh (µs) | gathered − slowest (ms) |")
    L.append("|--:|---|---|---|---|--:|--:|")
    for r in range(1, rounds + 1):
        q = " / ".join(fmt(per["qps"][s].get(r)) for s in SERVERS)
        c = " / ".join(fmt(per["cpu_us"][s].get(r), 1) for s in ["meshdns", "unbound"])
        rs = f"{fmt(per['rss_idle_kb']['meshdns'].get(r), 1)} / {fmt(per['rss_10k_kb']['meshdns'].get(r), 1)}"
        L.append(
            f"| {r} | {q} | {fr(rr('qps', 'meshdns', 'unbound', r))}, {fr(rr('qps', 'meshdns', 'floor', r))} | {c} | {rs} | {fmt(per['miss_add']['meshdns'].get(r))} | {fmt(per['g_add']['gathered'].get(r), 2)} |"
        )
    L.append("")

    if not groups & {"hits", "misses", "gather"}:
        del L[mark:]

    notes = []
    hits = raw[("meshdns", "qps_hits")]
    comp = {r: per["qps_done"]["meshdns"].get(r) for r in range(1, rounds + 1)}
    if hits:
        hr = [hits[r] / comp[r] for r in hits if comp.get(r)]
        if hr:
            notes.append(f"meshdns answered {min(hr) * 100:.1f}–{max(hr) * 100:.1f} % of the QPS runs' queries from its cache (its own counter).")
    ce = raw[("meshdns", "cache_entries")]
    if ce:
        notes.append(f"meshdns held {fmt(med(ce.values()))} cache entries when its 10k RSS was read.")
    lost_s = [f"{k[0]} {k[1]}: {v}" for k, v in sorted(lost.items()) if v]
    if lost_s:
        notes.append("Queries dnsperf counted as lost (no reply within its timeout): " + ", ".join(lost_s) + ".")
    L.append("## Method")
    L.append("")
    L.append(
        "Every round starts meshdns, unbound and dnsmasq afresh and runs each test on each server in a "
        "rotated order; the timed runs are cut in slices of BENCH_SLICE seconds, the servers taking turns "
        "slice by slice, so load from elsewhere on the machine falls on all of them alike. RSS is VmRSS from /proc: idle is one second after the first answer, 10k after "
        "10,000 distinct names (`h0..h9999.bench.test`) went through the cache twice. Cache-hit QPS is "
        "dnsperf over 1,000 cached names for BENCH_SECONDS. CPU time is utime+stime of the whole process "
        "(all threads) from /proc/PID/stat across a dnsperf run at the fixed rate, divided by the answers; "
        "the latency percentiles come from the same run (dnsperf -v). Cache misses: 10,000 names asked once "
        "each, one query in flight (bench/probe.c), name by name to the stand-in directly (NSD, minimal "
        "responses), to each server, to the floor relay and to the floor relay with a fresh socket per query in turn; the added latency is the server's median "
        "minus the direct median of the same round. The stand-in shares CPU 0 with the server under test "
        "(left to the scheduler, its placement doubled or halved the miss numbers from round to round). "
        "Gathered SRV: "
        "a meshdns with MESHDNS_CACHE_SIZE=0 and three clusters, each behind a Python asyncio proxy that "
        "holds queries 20/40/80 ms; queries alternate between it and the 80 ms proxy asked directly. "
        "Latency percentiles at the fixed rate include dnsperf's own pacing and the machine's noise: the "
        "floor's column shows how much of them no server can remove. "
        "The floor is bench/floor.c: recvmmsg/sendmmsg, the question echoed with QR set, no DNS work "
        "(for cache misses, the same program as a relay). "
        "meshdns pinned to one CPU runs one tokio worker, the same as unbound's one thread."
    )
    L.append("")
    for n in notes:
        L.append(f"- {n}")
    if notes:
        L.append("")
    L.append("![meshdns benchmark](latest.png)")
    L.append("")
    md = "\n".join(L)

    os.makedirs(results, exist_ok=True)
    with open(os.path.join(results, "latest.md"), "w", encoding="utf-8") as fh:
        fh.write(md)
    with open(os.path.join(results, f"{name}.md"), "w", encoding="utf-8") as fh:
        fh.write(md.replace("![meshdns benchmark](latest.png)", f"(chart of this run: latest.png when it was made; commit {meta.get('commit', '?')})"))
    # The same numbers for programs (bench/allocators.sh compares runs with them): the medians,
    # each round's values, the idle window and the metadata.
    summary = {"meta": meta, "medians": M, "rounds": {k: {s: dict(v) for s, v in d.items()} for k, d in per.items()},
               "idle": X["idle"], "swaps_add_ms": X["swaps_add"],
               "drops": {c: dict(d) for c, d in X["drops"].items()}}
    with open(os.path.join(results, "latest.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=1, sort_keys=True)
    chart(M, gather_all, legs, rate, os.path.join(results, "latest.png"), meta, X)
    print(md)


def chart(M, gather_all, legs, rate, path, meta, X):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib missing, no chart", file=sys.stderr)
        return

    def g(metric, s):
        return M.get(metric, {}).get(s) or 0

    colors = {"meshdns": "#1f77b4", "unbound": "#ff7f0e", "dnsmasq": "#2ca02c", "floor": "#7f7f7f", "direct": "#9467bd"}
    fig, axes = plt.subplots(3, 3, figsize=(15, 12.5))
    fig.suptitle(
        f"meshdns benchmark — {meta.get('date', '')}, {meta.get('commit', '')}, "
        f"medians of {meta.get('rounds')} rounds × {meta.get('seconds')} s, {meta.get('machine', '').split(',')[0]}",
        fontsize=11,
    )

    def bars(ax, labels, values, title, unit, target=None, target_label=None, fmtv="{:,.0f}"):
        b = ax.bar(labels, values, color=[colors.get(l.split()[0], "#888") for l in labels])
        for rect, v in zip(b, values):
            ax.annotate(fmtv.format(v), (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                        ha="center", va="bottom", fontsize=8)
        if target is not None:
            ax.axhline(target, color="red", linestyle="--", linewidth=1, label=target_label)
            ax.legend(fontsize=8, loc="upper left")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.margins(y=0.25)

    S = ["meshdns", "unbound", "dnsmasq", "floor"]
    bars(axes[0][0], S, [g("qps", s) for s in S], "cache-hit QPS (higher is better)", "queries/s",
         1.10 * g("qps", "unbound") or None, "target ≥ 1.10× unbound")
    bars(axes[0][1], S, [g("cpu_us", s) for s in S], f"CPU per query at {rate:,} qps (lower is better)", "µs",
         0.95 * g("cpu_us", "unbound") or None, "target ≤ 0.95× unbound", "{:.1f}")
    ax = axes[0][2]
    x = range(len(S))
    w = 0.38
    p50 = [g("p50", s) for s in S]
    p99 = [g("p99", s) for s in S]
    ax.bar([i - w / 2 for i in x], p50, w, label="p50", color="#1f77b4")
    ax.bar([i + w / 2 for i in x], p99, w, label="p99", color="#aec7e8")
    ax.set_xticks(list(x), S)
    ax.set_yscale("log")
    ax.set_ylabel("µs (log)")
    ax.set_title(f"latency at {rate:,} qps, cache hits", fontsize=10)
    ax.legend(fontsize=8)

    ax = axes[1][0]
    S3 = ["meshdns", "unbound", "dnsmasq"]
    x = range(len(S3))
    ax.bar([i - w / 2 for i in x], [g("rss_idle_kb", s) for s in S3], w, label="idle", color="#c5b0d5")
    ax.bar([i + w / 2 for i in x], [g("rss_10k_kb", s) for s in S3], w, label="10k entries", color="#8c564b")
    for i, s in enumerate(S3):
        ax.annotate(f"{g('rss_idle_kb', s):.1f}", (i - w / 2, g("rss_idle_kb", s)), ha="center", va="bottom", fontsize=8)
        ax.annotate(f"{g('rss_10k_kb', s):.1f}", (i + w / 2, g("rss_10k_kb", s)), ha="center", va="bottom", fontsize=8)
    ax.axhline(6, color="red", linestyle=":", linewidth=1, label="target idle ≤ 6 MiB")
    ax.axhline(10, color="red", linestyle="--", linewidth=1, label="target 10k ≤ 10 MiB")
    ax.set_xticks(list(x), S3)
    ax.set_ylabel("MiB")
    ax.set_title("resident memory (lower is better)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.margins(y=0.3)

    bars(axes[1][1], S3 + ["floor relay"], [g("miss_add", s) for s in S],
         f"cache miss: added p50 over the upstream direct ({g('miss_p50', 'direct'):.0f} µs)", "µs",
         25, "target ≤ 25 µs")

    ax = axes[1][2]
    gathered = gather_all.get("gathered", [])
    slowest = gather_all.get("slowest", [])
    if gathered or slowest:
        lo = min(gathered + slowest)
        hi = max(pct(gathered, 99) or lo, pct(slowest, 99) or lo, max(legs) + 3)
        bins = [lo + (hi - lo) * i / 60 for i in range(61)]
        ax.hist(slowest, bins=bins, alpha=0.6, label="slowest leg, direct", color=colors["direct"])
        ax.hist(gathered, bins=bins, alpha=0.6, label="meshdns gathered", color=colors["meshdns"])
        ax.axvline(max(legs), color="black", linestyle=":", linewidth=1)
        ax.axvline((M.get("g_p50", {}).get("slowest") or max(legs)) + 2, color="red", linestyle="--", linewidth=1,
                   label="target: slowest + 2 ms")
        ax.legend(fontsize=8)
        ax.set_xlabel("ms")
        ax.set_title(f"gathered SRV, legs {'/'.join(f'{x:g}' for x in legs)} ms (sum {sum(legs):g} ms)", fontsize=10)
    # Third row: the overload RSS traces (round 1), CPU at a pod's rate, DoT vs UDP misses.
    ax = axes[2][0]
    for c, color in zip("abc", ["#1f77b4", "#d62728", "#2ca02c"]):
        pts = X["ovl_series"].get(c)
        if pts:
            ax.plot([t for t, _ in pts], [mb for _, mb in pts], color=color, label=OVERLOAD_CASES[c][:3])
    ax.axhline(24, color="red", linestyle="--", linewidth=1, label="peak target 24 MiB")
    ax.axhline(12, color="red", linestyle=":", linewidth=1, label="after target 12 MiB")
    ax.set_yscale("log")
    ax.set_xlabel("s from the start of the flood")
    ax.set_ylabel("VmRSS, MiB (log)")
    ax.set_title("overload floods (round 1): (a) mangled, (b) black-holed misses, (c) TCP not reading", fontsize=9)
    ax.legend(fontsize=7)
    S3 = ["meshdns", "unbound", "dnsmasq"]
    bars(axes[2][1], S3, [g("low_cpu_us", s) for s in S3],
         f"CPU per query at {meta.get('low_rate', '200')} qps, paced (lower is better)", "µs",
         g("low_cpu_us", "unbound") or None, "target ≤ 1.00× unbound", "{:.1f}")
    labels = ["UDP", "TCP", "DoT"]
    ax = axes[2][2]
    x = range(3)
    mesh = [g("tls_p50", k) for k in ["u", "p", "t"]]
    direct = [g("direct_p50", k) for k in ["udp", "tcp", "dot"]]
    ax.bar([i - w / 2 for i in x], mesh, w, label="through meshdns (miss)", color="#1f77b4")
    ax.bar([i + w / 2 for i in x], direct, w, label="NSD directly (dnsperf)", color="#9467bd")
    if mesh[0]:
        ax.axhline(1.5 * mesh[0], color="red", linestyle="--", linewidth=1, label="target: DoT ≤ 1.5× UDP")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("µs, p50")
    ax.set_title("cache miss to a cluster by transport", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
