#!/usr/bin/env python3
"""Checks tensord_bench's JSON document (--json FILE): every section is
there, and every time, rate and ratio in it is a positive number.

    bench/check_bench_json.py FILE"""
import json
import sys


def positive(path, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        sys.exit(f"{path}: expected a positive number, got {value!r}")


def check_figures(path, node):
    """Every key naming a time, a rate or a ratio holds a positive number."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith(("_s", "_gbps", "ratio", "calls_per_s")):
                positive(f"{path}.{key}", value)
            else:
                check_figures(f"{path}.{key}", value)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            check_figures(f"{path}[{i}]", value)


def main():
    doc = json.load(open(sys.argv[1]))
    for key in ("tiny_op", "trivial_call", "tiny_op_read", "upload_4_bytes", "download_4_bytes", "chain", "clients",
                "transfers", "tls"):
        if key not in doc:
            sys.exit(f"no '{key}' in {sys.argv[1]}")
    for p in ("p50", "p99"):
        for key in ("tiny_op", "trivial_call", "tiny_op_read"):
            for side in ("tensord_s", "floor_s", "ratio"):
                positive(f"{key}.{p}.{side}", doc[key][p][side])
    for key in ("graph_read_s", "floor_pipelined_s", "pipelined_floor_ratio"):
        positive(f"chain.{key}", doc["chain"].get(key))
    if [c["clients"] for c in doc["clients"]] != [8, 64]:
        sys.exit(f"clients: expected rows for 8 and 64, got {doc['clients']}")
    if not doc["transfers"] or not doc["tls"] or not doc["tls"]["transfers"]:
        sys.exit("transfers: a size each, plain and over TLS, expected")
    for p in ("p50", "p99"):
        for key in ("tiny_op", "trivial_call"):
            positive(f"tls.{key}.{p}.ratio", doc["tls"][key][p]["ratio"])
    check_figures("", doc)
    print(f"ok: {len(doc['transfers'])} plain and {len(doc['tls']['transfers'])} TLS transfer sizes")


if __name__ == "__main__":
    main()
