#!/usr/bin/env python3
"""Turns a bench/run.sh work directory into the results table and chart.

    report.py WORKDIR RESULTS_DIR NAME

Reads WORKDIR/meta.env, WORKDIR/raw.tsv and the dnsperf / srvprobe outputs
(r<round>-<test>-<server>.out). Writes RESULTS_DIR/latest.md, RESULTS_DIR/NAME.md and
RESULTS_DIR/latest.png (when matplotlib is there), and prints the markdown.

Every number in the tables is the median over the rounds of that round's value; a ratio is the
ratio of the medians.
"""

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


def fr(x):
    return "—" if x is None else f"{x:.2f}×"


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
        out, k = [], 1
        while os.path.exists(os.path.join(work, f"r{r}-{test}-{server}-{k}.out")):
            out.append(read(os.path.join(work, f"r{r}-{test}-{server}-{k}.out")))
            k += 1
        return out

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
        for s in ["direct", "meshdns", "unbound", "dnsmasq", "floor"]:
            lat = sorted(by.get("relay" if s == "floor" else s, []))
            per["miss_p50"][s][r] = pct(lat, 50)
            per["miss_p90"][s][r] = pct(lat, 90)
            per["miss_n"][s][r] = len(lat)
        for s in ["meshdns", "unbound", "dnsmasq", "floor"]:
            a, b = per["miss_p50"][s].get(r), per["miss_p50"]["direct"].get(r)
            per["miss_add"][s][r] = None if a is None or b is None else a - b
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

    M = {m: {s: med(v.values()) for s, v in d.items()} for m, d in per.items()}

    def m(metric, server):
        return M.get(metric, {}).get(server)

    def rr(metric, a, b, r):
        x, y = per[metric][a].get(r), per[metric][b].get(r)
        return None if x is None or y in (None, 0) else x / y

    def rmed(metric, a, b):
        """Median over the rounds of a/b within each round: the servers of one round ran side by
        side, so their ratio is steadier than the ratio of two medians on a noisy machine."""
        return med([rr(metric, a, b, r) for r in range(1, rounds + 1)])

    # ------------------------------------------------------------------ targets (issue 10)
    hit_qps_ratio_unbound = rmed("qps", "meshdns", "unbound")
    hit_qps_ratio_floor = rmed("qps", "meshdns", "floor")
    cpu_ratio = rmed("cpu_us", "meshdns", "unbound")

    def spread(metric, a, b):
        xs = [rr(metric, a, b, r) for r in range(1, rounds + 1)]
        xs = [x for x in xs if x is not None]
        return f"rounds {min(xs):.2f}–{max(xs):.2f}" if len(xs) > 1 else ""
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

    targets = [
        ("cache-hit QPS vs unbound (1 thread)", "≥ 1.00×",
         f"{fr(hit_qps_ratio_unbound)} ({spread('qps', 'meshdns', 'unbound')}; {fmt(m('qps', 'meshdns'))} vs {fmt(m('qps', 'unbound'))} qps)",
         verdict(ge(hit_qps_ratio_unbound, 1.0))),
        ("cache-hit QPS vs the floor", "≥ 0.85×",
         f"{fr(hit_qps_ratio_floor)} ({spread('qps', 'meshdns', 'floor')}; {fmt(m('qps', 'meshdns'))} vs {fmt(m('qps', 'floor'))} qps)",
         verdict(ge(hit_qps_ratio_floor, 0.85))),
        (f"CPU time per query at {rate:,} qps", "≤ unbound's (≤ 1.00×)",
         f"{fr(cpu_ratio)} ({spread('cpu_us', 'meshdns', 'unbound')}; {fmt(m('cpu_us', 'meshdns'), 1, ' µs')} vs {fmt(m('cpu_us', 'unbound'), 1, ' µs')})",
         verdict(le(cpu_ratio, 1.0))),
        ("RSS idle", "≤ 8 MiB", fmt(m("rss_idle_kb", "meshdns"), 1, " MiB"),
         verdict(le(m("rss_idle_kb", "meshdns"), 8.0))),
        ("RSS with 10,000 cached entries", "≤ 24 MiB", fmt(m("rss_10k_kb", "meshdns"), 1, " MiB"),
         verdict(le(m("rss_10k_kb", "meshdns"), 24.0))),
        ("cache miss: added latency at the median over asking the upstream directly", "≤ 30 µs",
         f"{fmt(m('miss_add', 'meshdns'), 0, ' µs')} ({fmt(m('miss_p50', 'meshdns'), 0)} vs {fmt(m('miss_p50', 'direct'), 0)} µs; "
         f"unbound adds {fmt(m('miss_add', 'unbound'), 0, ' µs')}, the floor relay {fmt(m('miss_add', 'floor'), 0, ' µs')})",
         verdict(le(m("miss_add", "meshdns"), 30.0))),
        (f"gathered SRV, legs {'/'.join(f'{x:g}' for x in legs)} ms: median after the slowest leg", "≤ 2 ms",
         f"{fmt(g_add, 2, ' ms')} ({fmt(g_med, 1)} ms vs {fmt(m('g_p50', 'slowest'), 1)} ms for the slowest leg asked directly; sum of legs {sum(legs):g} ms)",
         verdict(le(g_add, 2.0))),
    ]

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
    L.append("## Targets (issue 10)")
    L.append("")
    L.append("| target | goal | measured | |")
    L.append("|---|---|---|---|")
    for t in targets:
        L.append("| " + " | ".join(t) + " |")
    L.append("")
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
        "responses), to each server and to the floor relay in turn; the added latency is the server's median "
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
    chart(M, gather_all, legs, rate, os.path.join(results, "latest.png"), meta)
    print(md)


def chart(M, gather_all, legs, rate, path, meta):
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
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
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
         g("qps", "unbound") or None, "target ≥ unbound")
    bars(axes[0][1], S, [g("cpu_us", s) for s in S], f"CPU per query at {rate:,} qps (lower is better)", "µs",
         g("cpu_us", "unbound") or None, "target ≤ unbound", "{:.1f}")
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
    ax.axhline(8, color="red", linestyle=":", linewidth=1, label="target idle ≤ 8 MiB")
    ax.axhline(24, color="red", linestyle="--", linewidth=1, label="target 10k ≤ 24 MiB")
    ax.set_xticks(list(x), S3)
    ax.set_ylabel("MiB")
    ax.set_title("resident memory (lower is better)", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    ax.margins(y=0.3)

    bars(axes[1][1], S3 + ["floor relay"], [g("miss_add", s) for s in S],
         f"cache miss: added p50 over the upstream direct ({g('miss_p50', 'direct'):.0f} µs)", "µs",
         30, "target ≤ 30 µs")

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
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
