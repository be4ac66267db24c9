#!/usr/bin/env python3
"""Checks the Grafana dashboard k8s/grafana/meshdns.json.

Usage: check_dashboard.py DASHBOARD.json [README.md]
- every query parses as PromQL (Grafana variables substituted first);
- every metric it names is a family of the README's metrics table (the operators' reference,
  which src/metrics.rs's unit tests hold to the binary's metrics::FAMILIES; histograms only via `_bucket`), and it names
  no other metric;
- the panels cover every family of that table;
- every label a query groups by or a legend shows is one of its metrics' labels in that table
  (or a target label): no `cluster` left from before the label was `peer`;
- every panel uses the ${datasource} variable; ids are unique.
Prints one PASS/FAIL line per check, exits 1 on any failure.
"""
import json
import re
import sys

from checks import Checks

import promql_parser



def readme_rows(path):
    """(name, type, labels) of every row of the table under `## Metrics` in the README."""
    text = open(path).read()
    section = text.split("\n## Metrics\n", 1)[1] if "\n## Metrics\n" in text else ""
    section = section.split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `meshdns_"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.append((cells[0].strip("`"), cells[1], set(re.findall(r"`(\w+)`", cells[2]))))
    return rows


def readme_families(path):
    """(name, type) of every row of the table under `## Metrics` in the README."""
    return [(name, kind) for name, kind, _ in readme_rows(path)]


# Labels every scraped series has (the target's) and `le` of histogram buckets.
TARGET_LABELS = {"namespace", "pod", "job", "instance", "container", "le"}


def unknown_labels(expr, legend, labels):
    """Labels `expr` groups by, or `legend` shows, that none of its metrics has."""
    metrics = set(re.findall(r"\bmeshdns_[a-z_]+", expr))
    known = set().union(*(labels.get(re.sub(r"_(bucket|sum|count)$", "", m), set()) for m in metrics)) | TARGET_LABELS
    used = {x.strip() for g in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr) for x in g.split(",") if x.strip()}
    used |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    return used - known


# Selector names: an identifier directly followed by `{` (every query here filters by pod).
SELECTOR_RE = re.compile(r"(?<![\w:])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}

CHECKS = Checks("dashboard")


def substitute(expr):
    for var, val in (("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "1h")):
        expr = expr.replace(var, val)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def main():
    readme = sys.argv[2] if len(sys.argv) > 2 else "README.md"
    families = readme_families(readme)
    CHECKS.check(f"{readme} has a metrics table", bool(families), "no `| `meshdns_...` |` rows under `## Metrics`")
    histograms = {n for n, t in families if t == "histogram"}
    allowed = {n for n, t in families if t != "histogram"}
    allowed |= {h + suffix for h in histograms for suffix in ("_bucket", "_sum", "_count")}
    must_cover = {n for n, t in families if t != "histogram"} | {h + "_bucket" for h in histograms}
    with open(sys.argv[1]) as f:
        try:
            dash = json.load(f)
        except json.JSONDecodeError as e:
            CHECKS.check("is valid JSON", False, str(e))
            return 1
    CHECKS.check("is valid JSON with title, uid and panels",
          bool(dash.get("title")) and bool(dash.get("uid")) and bool(dash.get("panels")), "missing keys")
    all_panels = list(panels(dash["panels"]))
    ids = [p.get("id") for p in all_panels]
    CHECKS.check("panel ids are unique", len(ids) == len(set(ids)), f"{ids}")
    vars_ = {v["name"] for v in dash.get("templating", {}).get("list", [])}
    CHECKS.check("has the datasource variable", "datasource" in vars_, f"{vars_}")

    exprs, bad_ds, unparsable, foreign, used = [], [], [], [], set()
    for p in all_panels:
        if p.get("type") == "row":
            continue
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            bad_ds.append(p.get("title"))
        for t in p.get("targets", []):
            expr = t.get("expr", "")
            exprs.append(expr)
            if (t.get("datasource") or {}).get("uid") != "${datasource}":
                bad_ds.append(f"{p.get('title')}/{t.get('refId')}")
            try:
                promql_parser.parse(substitute(expr))
            except Exception as e:  # the parser raises ValueError with the reason
                unparsable.append(f"{p.get('title')}: {e}")
            names = set(re.findall(r"\bmeshdns_[a-z_]+", expr))
            names |= {n for n in SELECTOR_RE.findall(expr) if n not in KEYWORDS}
            used |= names
            foreign += [f"{p.get('title')}: {n}" for n in names if n not in allowed]
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("definition") or ""
        names = set(re.findall(r"\bmeshdns_[a-z_]+", q))
        used |= names
        foreign += [f"variable {v['name']}: {n}" for n in names if n not in allowed]

    CHECKS.check(f"{len(exprs)} queries parse as PromQL", exprs and not unparsable, "; ".join(unparsable))
    labels = {name: ls for name, _, ls in readme_rows(readme)}
    stray = [f"{p.get('title')}: {sorted(bad)}" for p in all_panels for t in p.get("targets", [])
             if (bad := unknown_labels(t.get("expr", ""), t.get("legendFormat", ""), labels))]
    CHECKS.check("every label a query groups by or a legend shows is one of its metrics' (README) or a target label",
                 not stray, "; ".join(stray))
    # A literal legend of a one-metric query names that metric: every word of it is a word of
    # the metric's name ("loops" for meshdns_loops_total, not "partial").
    mislabelled = []
    for p in all_panels:
        for t in p.get("targets", []):
            legend = t.get("legendFormat", "")
            names = set(re.findall(r"\bmeshdns_[a-z_]+", t.get("expr", "")))
            if legend and "{{" not in legend and len(names) == 1:
                words = set(next(iter(names)).split("_"))
                if not set(legend.lower().split()) <= words:
                    mislabelled.append(f"{p.get('title')}: {legend!r} for {next(iter(names))}")
    CHECKS.check("every literal legend of a one-metric query is words of that metric's name", not mislabelled,
                 "; ".join(mislabelled))
    CHECKS.check("queries name only the README's metric families (histograms via _bucket/_sum/_count)", not foreign, "; ".join(foreign))
    missing = must_cover - used
    CHECKS.check("every metric family is shown", not missing, f"missing {sorted(missing)}")
    CHECKS.check("histogram quantiles aggregate by le",
          all("by (le" in e for e in exprs if "histogram_quantile" in e), "histogram_quantile without `by (le, ...)`")
    CHECKS.check("every panel and query uses the ${datasource} variable", not bad_ds, f"{bad_ds}")
    CHECKS.check("no query carries a query-name label (cardinality)", not any("qname" in e or "name=" in e for e in exprs), "")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
