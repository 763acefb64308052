#!/usr/bin/env python3
"""Every ddp_* series the Grafana dashboard and the alert rules use is one a
real daemon exports: check_monitoring_names.py METRICS_TEXT DASHBOARD_JSON RULES_YML.
A histogram's _bucket/_sum/_count count as its name. Also checks the
dashboard's shape: a uid, a title, panels with unique ids, and every query
panel with a datasource and at least one expression. Exit 0, or 1 naming
each problem on a line."""
import json
import re
import sys

metrics_text, dashboard_path, rules_path = sys.argv[1:4]
exported = set()
histograms = set()
for line in open(metrics_text, encoding="utf-8"):
    if line.startswith("# TYPE "):
        _, _, name, kind = line.split()[:4]
        exported.add(name)
        if kind == "histogram":
            histograms.add(name)
    elif line and not line.startswith("#"):
        exported.add(re.split(r"[{ ]", line, 1)[0])
for h in histograms:
    exported.update({h + "_bucket", h + "_sum", h + "_count"})

problems = []
name_re = re.compile(r"\bddp_[a-z_]+\b")

dashboard = json.load(open(dashboard_path, encoding="utf-8"))
for key in ("uid", "title", "panels"):
    if not dashboard.get(key):
        problems.append(f"{dashboard_path}: no {key}")
ids = [p.get("id") for p in dashboard.get("panels", [])]
if len(ids) != len(set(ids)):
    problems.append(f"{dashboard_path}: panel ids are not unique: {ids}")
used = {}
for panel in dashboard.get("panels", []):
    if panel.get("type") == "row":
        continue
    targets = panel.get("targets") or []
    if not panel.get("datasource") or not targets:
        problems.append(f"{dashboard_path}: panel '{panel.get('title')}' has no datasource or no query")
    for t in targets:
        for name in name_re.findall(t.get("expr", "")):
            used.setdefault(name, f"{dashboard_path}: panel '{panel.get('title')}'")
for var in dashboard.get("templating", {}).get("list", []):
    query = var.get("query")
    text = query.get("query", "") if isinstance(query, dict) else str(query or "")
    for name in name_re.findall(text):
        used.setdefault(name, f"{dashboard_path}: variable '{var.get('name')}'")
for lineno, line in enumerate(open(rules_path, encoding="utf-8"), 1):
    if line.lstrip().startswith("#"):
        continue
    for name in name_re.findall(line):
        used.setdefault(name, f"{rules_path}:{lineno}")

for name, where in sorted(used.items()):
    if name not in exported:
        problems.append(f"{where}: {name} is not a series ddp-rendezvousd exports")
for p in problems:
    print("FAIL:", p)
print(f"{len(used)} ddp_* series used by the dashboard and the rules, all exported" if not problems else "")
sys.exit(1 if problems else 0)
