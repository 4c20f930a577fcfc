"""deploy/grafana/stoker.json cannot drift from the daemon: every metric and
label its PromQL names is one a real stokerd exports (`stokerctl metrics`),
and every variable it uses is defined."""

import json
import re

import stoker
from stoker_testutil import REPO

DASHBOARD = REPO / "deploy" / "grafana" / "stoker.json"
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
GRAFANA_VARS = {"__rate_interval", "__interval", "__range"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def queries(dash):
    """(where, PromQL) for every panel target and query variable."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p['title']!r}", t["expr"]))
            walk(p.get("panels", []))

    walk(dash["panels"])
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q) or re.fullmatch(r"label_values\((\w+)\)", q)
            assert m, f"variable {v['name']}: {q}"
            out.append((f"variable {v['name']}", m.group(1)))
            if m.lastindex == 2:
                out.append((f"variable {v['name']} label", f"__label__{m.group(2)}"))
    return out


def parse(expr):
    """(metric names, {metric or None: label names}) named by a PromQL expression."""
    labels = {}
    # Selectors: metric{label="...", ...}
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}", expr):
        names = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)))
        labels.setdefault(m.group(1), set()).update(names)
    # Grouping: by (a, b) / without (...) / on (...) / ignoring (...)
    for m in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels.setdefault(None, set()).update(x.strip() for x in m.group(1).split(",") if x.strip())
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\$\w+", " ", bare)
    metrics = set()
    for m in re.finditer(r"([a-zA-Z_:][\w:]*)(\s*\()?", bare):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_WORDS or re.fullmatch(r"\d\w*", word):
            continue
        metrics.add(word)
    return metrics, labels


def exported(text):
    """{metric name: label names} from a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s", line)
        assert m, line
        out.setdefault(m.group(1), set()).update(re.findall(r'(\w+)="', m.group(2) or ""))
    return out


def test_dashboard_names_what_stokerd_exports(daemon, dataset):
    d = daemon()
    # A client attached as a rank, so the per-client series exist.
    ld = stoker.Loader(dataset=str(dataset), socket=d.socket, batch_size=4, image_size=32, rank=1, world_size=2)
    next(iter(ld))
    text = d.ctl("metrics").stdout
    ld.close()
    have = exported(text)
    assert "stoker_client_images_total" in have, text

    dash = json.loads(DASHBOARD.read_text())
    defined = {v["name"] for v in dash["templating"]["list"]}
    found = set()
    for where, expr in queries(dash):
        if expr.startswith("__label__"):
            label = expr[len("__label__"):]
            assert label in TARGET_LABELS or any(label in ls for ls in have.values()), (where, label)
            continue
        used_vars = set(re.findall(r"\$\{?(\w+)", expr)) - GRAFANA_VARS
        assert used_vars <= defined, f"{where}: undefined {used_vars - defined} in {expr}"
        metrics, labels = parse(expr)
        assert metrics, f"{where}: no metric in {expr}"
        for name in metrics:
            assert name in have, f"{where}: {name} is not exported by stokerd"
        for name, ls in labels.items():
            known = TARGET_LABELS | (have[name] if name else set().union(*(have[m] for m in metrics)))
            assert ls <= known, f"{where}: labels {ls - known} not on {name or sorted(metrics)}"
        found |= metrics
    # The panels the dashboard promises, by what they read.
    for name in ("stoker_images_served_total", "stoker_client_images_total", "stoker_client_wait_seconds_total",
                 "stoker_worker_busy_seconds_total", "stoker_cache_hits_total", "stoker_cache_tier_bytes",
                 "stoker_memory_budget_bytes", "stoker_ring_bytes", "stoker_decode_errors_total"):
        assert name in found, f"the dashboard shows no {name}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_parse_reads_promql():
    """The checker itself: names, labels and functions told apart."""
    metrics, labels = parse('sum by (instance, tier) (rate(a_total{job=~"$job", x!="y"}[$__rate_interval])) '
                            '/ on (instance) b_bytes{tier="decoded"} + 2 * c')
    assert metrics == {"a_total", "b_bytes", "c"}
    assert labels == {None: {"instance", "tier"}, "a_total": {"job", "x"}, "b_bytes": {"tier"}}
