#!/usr/bin/env python3
"""bench/compare's two halves (bench/compare runs both).

measure: next to the RDMA device (inside tools/rxe-vm when the host has
    none): cordma-perf, perftest and ucx_perftest, each as a server and a
    client process, with matching parameters, every group of the plan
    (compare_plan.py) once per repetition, the order rotating; writes every
    run to one JSON file (compare_measure.py).
report: on the host: medians over the repetitions, the ratios cordma /
    perftest and cordma / UCX, the issue's targets; writes NAME.json,
    NAME.md and NAME.png (compare_report.py).

Why the interleaving matters: in a TCG VM absolute times drift with the
host's load, so only figures measured close together compare.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def sizes(text):
    try:
        out = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma list of byte counts")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma list of byte counts")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run the three programs (needs an RDMA device)")
    m.add_argument("--cordma-perf", required=True)
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--lat-sizes", type=sizes, default=[8, 64, 512, 4096])
    m.add_argument("--bw-sizes", type=sizes, default=[65536, 1048576])
    m.add_argument("--lat-iters", type=int, default=5000)
    m.add_argument("--rate-iters", type=int, default=20000)
    m.add_argument("--idle-seconds", type=int, default=10)
    m.add_argument("--timeout", type=float, default=120, help="seconds a client may take")
    m.add_argument("--out", required=True)
    r = sub.add_parser("report", help="write NAME.json, NAME.md and NAME.png")
    r.add_argument("--raw", required=True)
    r.add_argument("--where", default="")
    r.add_argument("--overhead", help="coroutine_overhead --json's output")
    r.add_argument("--host-load", help="bench/stream/host_load.py's samples while measuring")
    r.add_argument("--out", required=True, help="path without extension")
    opts = parser.parse_args()
    if opts.command == "measure":
        import compare_measure
        return compare_measure.measure(opts)
    import compare_report
    return compare_report.report(opts)


if __name__ == "__main__":
    sys.exit(main())
