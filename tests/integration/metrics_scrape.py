#!/usr/bin/python3
"""Scrapes tensord's Prometheus endpoint and parses it with the reference
parser (python3-prometheus-client), so the exposition is checked by an
implementation other than the one that wrote it.

    metrics_scrape.py HOST:PORT

Prints one JSON object: "samples" maps 'name{label="value",...}' (labels
sorted) to the value; "types" maps each family to its type; "status" holds
the HTTP status of GET /metrics, GET /nope and POST /metrics. Exits 1 with a
message when the text does not parse or a histogram is inconsistent.
"""

import json
import math
import sys
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("metrics_scrape.py: the prometheus_client module is missing "
             "(Debian: python3-prometheus-client; scripts/install-deps.sh installs it)")


def status_of(url, data=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), ""


def key(name, labels):
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def check_histogram(family):
    """Buckets are cumulative and end at +Inf == _count, per label set."""
    series = {}
    for s in family.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        entry = series.setdefault(key("", labels), {"buckets": [], "count": None})
        if s.name.endswith("_bucket"):
            entry["buckets"].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            entry["count"] = s.value
    for labels, entry in series.items():
        buckets = sorted(entry["buckets"])
        if not buckets or not math.isinf(buckets[-1][0]):
            sys.exit(f"{family.name}{labels}: no +Inf bucket")
        counts = [c for _, c in buckets]
        if counts != sorted(counts):
            sys.exit(f"{family.name}{labels}: bucket counts are not cumulative: {buckets}")
        if counts[-1] != entry["count"]:
            sys.exit(f"{family.name}{labels}: +Inf bucket {counts[-1]} != _count {entry['count']}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: metrics_scrape.py HOST:PORT")
    base = "http://" + sys.argv[1]
    code, content_type, text = status_of(base + "/metrics")
    if code != 200:
        sys.exit(f"GET /metrics answered {code}")
    samples, types = {}, {}
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends
        sys.exit(f"the exposition does not parse: {e!r}")
    for family in families:
        types[family.name] = family.type
        if family.type == "histogram":
            check_histogram(family)
        for s in family.samples:
            k = key(s.name, s.labels)
            if k in samples:
                sys.exit(f"sample {k} appears twice")
            samples[k] = s.value
    json.dump({
        "samples": samples,
        "types": types,
        "content_type": content_type,
        "status": {
            "get_metrics": code,
            "get_other": status_of(base + "/nope")[0],
            "post_metrics": status_of(base + "/metrics", data=b"x")[0],
        },
    }, sys.stdout)


if __name__ == "__main__":
    main()
