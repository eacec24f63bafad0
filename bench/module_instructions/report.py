#!/usr/bin/env python3
"""bench/module_instructions/run's report: instructions and allocations per
round trip of each module, from callgrind output files (one dump per run,
every thread summed), as (I(n2) - I(n1)) / (n2 - n1).

Reads WORK/runs.jsonl and WORK/inside.json; writes NAME.json (every figure,
every function) and NAME.md (the table the README quotes, then each test's
costliest functions). The callgrind format is parsed by
bench/lib/instructions.py, shared with bench/instructions.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import instructions as ins  # noqa: E402

WHAT = {
    "send": "engine: 8 B SEND, answered (receive_queue both sides)",
    "rpc": "rpc: 64 B call to an inline echo handler",
    "rpc_into": "rpc: the same, call_into + handle_into (in place)",
    "stream": "stream: 64 B write, answered with 64 B",
    "barrier": "group of 2: barrier",
    "bcast": "group of 2: 8 B broadcast from rank 0",
    "c": "C API: cordma_send + cordma_recv of 64 B, answered",
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for a in ("--work", "--out", "--name", "--iters", "--tests", "--commit", "--code-commit", "--dirty",
              "--buildtype", "--where"):
        p.add_argument(a, required=True)
    p.add_argument("--root", default="")
    p.add_argument("--reps", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    n1, n2 = (int(x) for x in args.iters.split(","))
    inside = json.load(open(os.path.join(args.work, "inside.json")))
    runs = [json.loads(line) for line in open(os.path.join(args.work, "runs.jsonl")) if line.strip()]
    parsed, seconds, problems = {}, {}, []
    for r in runs:
        run = ins.parse(os.path.join(args.work, r["measured"]))
        if run.summed != run.total:
            problems.append(f"{r['measured']}: self costs sum to {run.summed}, totals say {run.total}")
        parsed[(r["test"], r["rep"], r["iters"])] = run
        seconds[(r["test"], r["rep"], r["iters"])] = r["seconds"]
    where = args.where + (f", guest kernel {inside['kernel']}" if inside.get("in_vm") else "")
    result = {"name": args.name, "date": datetime.date.today().isoformat(), "where": where,
              "commit": args.commit, "code_commit": args.code_commit, "dirty": args.dirty == "1",
              "buildtype": args.buildtype, "valgrind": inside["valgrind"], "iters": [n1, n2], "reps": args.reps,
              "warmup": args.warmup, "measuring_seconds": inside["seconds"],
              "method": "(Ir(n2) - Ir(n1)) / (n2 - n1), Ir = user-space instructions executed (callgrind) by "
                        "every thread of cordma_module_messages in its measured window (--instr-atstart=no), "
                        "the two runs differing only in -n",
              "problems": problems, "tests": []}
    for test in args.tests.split(","):
        reps = []
        for rep in range(1, args.reps + 1):
            a, b = parsed.get((test, rep, n1)), parsed.get((test, rep, n2))
            if a is None or b is None:
                continue
            pw = ins.per_write(a, b, n1, n2, args.root)
            pw["rep"] = rep
            pw["seconds"] = {str(n1): seconds[(test, rep, n1)], str(n2): seconds[(test, rep, n2)]}
            reps.append(pw)
        if not reps:
            continue
        first = reps[0]
        result["tests"].append({
            "test": test, "what": WHAT[test],
            "total": ins.spread(r["total"] for r in reps),
            "groups": {g: ins.spread(r["groups"].get(g, 0) for r in reps) for g in ins.GROUP_ORDER},
            "allocations": ins.spread(r["allocs"]["allocations"] for r in reps),
            "operator_new": ins.spread(r["allocs"]["operator_new"] for r in reps),
            "frees": ins.spread(r["allocs"]["frees"] for r in reps),
            "top_cordma_functions": [f for f in first["functions"] if f["group"] == "cordma"][:args.top],
            "top_other_functions": [f for f in first["functions"] if f["group"] != "cordma"][:args.top],
            "allocating_callers": allocating_callers(parsed[(test, first["rep"], n1)],
                                                     parsed[(test, first["rep"], n2)], n2 - n1),
            "all_functions": first["functions"],
            "reps": [{"rep": r["rep"], "total": r["total"], "groups": r["groups"], "allocs": r["allocs"],
                      "seconds": r["seconds"]} for r in reps],
        })
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    with open(args.out + ".md", "w") as f:
        f.write(render_md(result, args))
    for t in result["tests"]:
        print(f"{t['test']}: {ins.fmt(t['total']['median'])} instructions per round trip "
              f"(cordma's own {ins.fmt(t['groups']['cordma']['median'])}), "
              f"{ins.fmt(t['allocations']['median'], 2)} allocations")
    for problem in problems:
        print("warning: " + problem, file=sys.stderr)


def allocating_callers(short, long_, scale):
    """Who calls malloc (and operator new) per round trip, by calling function."""
    out = {}
    for key in set(short.edges) | set(long_.edges):
        caller, callee = key
        if callee not in ins.ALLOC_FUNCTIONS and not ins.NEW_RE.match(callee):
            continue
        if caller in ins.ALLOC_FUNCTIONS or ins.NEW_RE.match(caller):
            continue
        d = (long_.edges.get(key, 0) - short.edges.get(key, 0)) / scale
        if abs(d) >= 0.005:
            out[caller] = out.get(caller, 0) + d
    return [{"caller": c, "per_round_trip": v} for c, v in sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))]


def render_md(result, args):
    n1, n2 = result["iters"]
    out = [f"# Instructions per message, by module: {result['name']}\n"]
    code = result["code_commit"]
    out.append(f"Measured {result['date']} on {result['where']}; commit `{result['commit']}`"
               + (f" (lib/, include/ and the program as of `{code}`)" if code and code != result["commit"] else "")
               + (" with uncommitted changes" if result["dirty"] else "")
               + f"; build type {result['buildtype']}; {result['valgrind']}; "
               f"{ins.plural(result['reps'], 'repetition')} of each pair of runs, "
               f"{result['measuring_seconds']} s of measuring.\n")
    out.append("**Method.** `bench/module_instructions/module_messages.cpp` runs one kind of round trip "
               f"over and over ({result['warmup']} first, then n), both ends in one process on one builder "
               "(one event listener thread, busy polling: under valgrind a thread waiting in io_uring stops "
               "the others), over the device's loopback, every message checked. callgrind counts only the "
               "measured window, every thread: valgrind starts with --instr-atstart=no, and the program "
               "starts instrumentation before its first measured round trip and stops it after its last. "
               f"Each figure is (Ir(n2) − Ir(n1)) / (n2 − n1), n1 = {n1:,} and n2 = {n2:,}, so the window's "
               "edges cancel: **what both sides spend on one round trip** (a request and its answer). Ir "
               "counts user-space instructions only: system calls and rxe's work in the kernel are not in "
               "it. Work driven by the clock (keepalives, liveness reads: about once a second) is in a "
               "figure only as far as the longer run lasted longer. Allocations are calls into malloc, "
               "calloc, realloc, aligned_alloc, posix_memalign and memalign.\n")
    for problem in result["problems"]:
        out.append(f"**Warning:** {problem}\n")
    out.append("| per round trip, both sides | all user space | cordma's own | libibverbs + rxe | libc "
               "| libstdc++ | other | allocations | of them operator new |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for t in result["tests"]:
        g = t["groups"]
        verbs = {"median": g["libibverbs"]["median"] + g["rxe provider"]["median"],
                 "min": g["libibverbs"]["min"] + g["rxe provider"]["min"],
                 "max": g["libibverbs"]["max"] + g["rxe provider"]["max"]}
        verbs["range"] = verbs["max"] - verbs["min"]
        out.append(f"| {t['what']} | **{ins.range_text(t['total'])}** | {ins.range_text(g['cordma'])} | "
                   f"{ins.range_text(verbs)} | {ins.range_text(g['libc'])} | {ins.range_text(g['libstdc++'])} | "
                   f"{ins.range_text(g['other'])} | **{ins.range_text(t['allocations'], 2)}** | "
                   f"{ins.range_text(t['operator_new'], 2)} |")
    out.append("")
    out.append(f"The median over {ins.plural(result['reps'], 'repetition')}, the range in brackets where "
               "they differ. cordma's own: libcordma.so and the program (which holds the header templates "
               "it instantiates). \"other\" is mostly liburing and the dynamic loader.\n")
    for t in result["tests"]:
        out.append(f"## {t['test']}: {t['what']}\n")
        out.append("Seconds per run under callgrind (n1 / n2): " +
                   "; ".join(f"{r['seconds'][str(n1)]} / {r['seconds'][str(n2)]}" for r in t["reps"]) + "\n")
        if t["allocating_callers"]:
            out.append("Allocations per round trip, by the function that called malloc or operator new:\n")
            out.append("| per round trip | caller |")
            out.append("| ---: | --- |")
            for c in t["allocating_callers"][:args.top]:
                out.append(f"| {ins.fmt(c['per_round_trip'], 2)} | `{ins.md_escape(ins.short_fn(c['caller']))}` |")
            out.append("")
        out.append(f"cordma's top {args.top} functions (self instructions per round trip, repetition 1):\n")
        out.append("| self Ir | with callees | calls | function |")
        out.append("| ---: | ---: | ---: | --- |")
        for f in t["top_cordma_functions"]:
            incl = ins.fmt(f["inclusive_per_write"]) if "inclusive_per_write" in f else "-"
            out.append(f"| {ins.fmt(f['self_per_write'])} | {incl} | {ins.fmt(f['calls_per_write'], 2)} | "
                       f"`{ins.md_escape(ins.short_fn(f['function']))}` |")
        out.append("")
        out.append(f"Outside cordma, the top {args.top}:\n")
        out.append("| self Ir | calls | object | function |")
        out.append("| ---: | ---: | --- | --- |")
        for f in t["top_other_functions"]:
            out.append(f"| {ins.fmt(f['self_per_write'])} | {ins.fmt(f['calls_per_write'], 2)} | {f['object']} | "
                       f"`{ins.md_escape(ins.short_fn(f['function'], 80))}` |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
