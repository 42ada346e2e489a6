#!/usr/bin/env python3
"""Replays the shared cluster traces under every policy with `tide sim` and
prints the tables of docs/scheduling.md: average, p50 and p99 JCT, average
queueing, preemptions, the share of the oracle's gain each policy captures,
and its p99 against FIFO's.

    scripts/scheduling-report.py [--tide build/tide] [--traces ../shared/traces]
"""
import argparse
import json
import os
import subprocess
import sys
import time

POLICIES = ["fifo", "sjf-oracle", "fair", "tide"]


def loads(t):
    philly = f"{t}/philly-pollux"
    window = ["--trace", f"{philly}/philly.csv", "--format", "philly",
              "--since", "2017-10-01", "--until", "2017-11-30"]
    vcs = ["--cluster", f"{philly}/cluster/philly_vc_nodes.csv"]
    ali = f"{t}/alibaba-openb-gpu-2023"
    alibaba = ["--trace", f"{ali}/openb_pod_list_gpuspec33.csv", "--format", "alibaba-openb",
               "--cluster", f"{ali}/openb_node_list_gpu_node.csv"]
    return [
        ("Philly 2017-10-01..11-30, 11 VCs, 352 nodes (real size)", window + vcs),
        ("Philly window, half the nodes (176)", window + vcs + ["--scale", "0.5"]),
        ("Philly window, one shared cluster of 70x8 (heavily loaded)", window + ["--cluster", "70x8"]),
        ("Alibaba openb gpuspec33, 1,213 GPU nodes (real size)", alibaba),
        ("Alibaba openb gpuspec33, 1% of each node group (89 GPUs)", alibaba + ["--scale", "0.01"]),
        ("Philly-derived Chronus MIX2, one cluster of 32x8", [
            "--trace", f"{t}/philly-chronus/trace_job_Philly_MIX2.csv", "--format", "chronus",
            "--cluster", "32x8"]),
    ]


def run(tide, args, policy):
    start = time.monotonic()
    out = subprocess.run([tide, "sim", *args, "--policy", policy, "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    result["wall_s"] = time.monotonic() - start
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tide", default="build/tide")
    ap.add_argument("--traces", default=os.path.join(os.path.dirname(__file__), "../../shared/traces"))
    a = ap.parse_args()
    for title, args in loads(os.path.normpath(a.traces)):
        rows = {p: run(a.tide, args, p) for p in POLICIES}
        fifo, oracle = rows["fifo"], rows["sjf-oracle"]
        gain = fifo["avg_jct_s"] - oracle["avg_jct_s"]
        print(f"\n### {title}\n")
        print("`tide sim " + " ".join(x.replace(os.path.normpath(a.traces), "../shared/traces")
                                       for x in args) + " --policy P`\n")
        print(f"{fifo['jobs']:,} jobs completed, {fifo['unschedulable']} unschedulable, "
              f"{fifo['gpus']:,} GPUs; {fifo['walltime']}\n")
        print("| policy | avg JCT s | p50 JCT s | p99 JCT s | avg queue s | preemptions "
              "| share of oracle gain | p99 vs FIFO | Jain FTF | sim wall s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in POLICIES:
            r = rows[p]
            share = "n/a (no gain to capture)" if gain < 1 else \
                f"{100 * (fifo['avg_jct_s'] - r['avg_jct_s']) / gain:.0f}%"
            p99 = f"{100 * (r['p99_jct_s'] / fifo['p99_jct_s'] - 1):+.1f}%"
            print(f"| {p} | {r['avg_jct_s']:,.0f} | {r['p50_jct_s']:,.0f} | {r['p99_jct_s']:,.0f} "
                  f"| {r['avg_queue_s']:,.0f} | {r['preemptions']:,} | {share} | {p99} "
                  f"| {r['jain_ftf']:.3f} | {r['wall_s']:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
