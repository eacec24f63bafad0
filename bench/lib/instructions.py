#!/usr/bin/env python3
"""bench/instructions' report: instructions and allocations per RDMA write,
from callgrind output files.

parse FILE...   one summary per callgrind.out file (JSON on stdout), to look
                at a single dump.
report          reads the runs bench/instructions made (WORK/runs.jsonl: one
                line per run: its test, iteration count, repetition, and the
                event listener thread's dump of the measured phase), takes for
                every test and repetition the difference of the long run and
                the short one divided by the difference in writes, and writes
                NAME.json and NAME.md.

Why the difference: the measured phase's dump still holds the phase's own
start and end (spawning the worker coroutine, reading the clocks, joining);
two runs that differ only in the number of writes differ only by the writes,
so (I(n2) - I(n1)) / (n2 - n1) is the cost of one write.

The callgrind.out format is parsed directly (callgrind's "Callgrind Format
Specification"): `ob=`, `fl=`, `fi=`, `fe=`, `fn=` set the object, file,
inlined-from file and function that the following cost lines belong to;
`cob=`, `cfi=`/`cfl=`, `cfn=` name the callee of the next `calls=COUNT
TARGET` line, whose following cost line is that call's inclusive cost (not
the caller's self cost; a further line at the same position is the cost of
a skipped PLT stub, which is the caller's). Names are compressed: `(N) name`
defines N, a later `(N)` alone refers to it; objects, files and functions
each have their own table. Positions (`positions: instr line` with
--dump-instr=yes) may be absolute, `+N`/`-N` relative to the previous one,
or `*` (the same).
"""

import argparse
import datetime
import glob
import json
import os
import re
import statistics
import sys

# The libc entry points that allocate. operator new and friends end in one of
# them (libstdc++'s operator new calls malloc; the aligned forms
# aligned_alloc), so counting these counts every heap allocation once;
# operator new is counted separately too, to say where they come from. A call
# from one of them to another (realloc(NULL, n) calls malloc; reallocarray,
# not in the list, calls realloc) is not counted again.
ALLOC_FUNCTIONS = {"malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign",
                   "memalign", "valloc", "pvalloc", "__libc_malloc", "__libc_calloc", "__libc_realloc",
                   "__libc_memalign", "__posix_memalign", "__libc_valloc", "__libc_pvalloc"}
FREE_FUNCTIONS = {"free", "__libc_free", "cfree"}
NEW_RE = re.compile(r"^operator new(\[\])?\(")
DELETE_RE = re.compile(r"^operator delete(\[\])?\(")


def object_group(ob):
    """The report's column for an ELF object (a path as callgrind names it)."""
    base = os.path.basename(ob)
    if base.startswith("libcordma.so") or base in ("cordma-perf", "cordma_module_messages"):
        return "cordma"
    if base.startswith("libibverbs.so"):
        return "libibverbs"
    if re.match(r"librxe-rdmav\d+\.so", base):
        return "rxe provider"
    if base.startswith("libc.so"):
        return "libc"
    if base.startswith("libstdc++.so"):
        return "libstdc++"
    return "other"


# Symbols callgrind names by another name of the same code.
ALIASES = {"pthread_spin_init@@GLIBC_2.34": "= pthread_spin_unlock: one function in x86-64 glibc",
           "pthread_spin_init": "= pthread_spin_unlock: one function in x86-64 glibc"}

GROUP_ORDER = ["cordma", "libibverbs", "rxe provider", "libc", "libstdc++", "other"]


def source_kind(path, root):
    """Where the source of an instruction of cordma's objects comes from: the
    library (lib/, include/cordma/), the benchmark harness (bench/),
    libstdc++'s headers, verbs.h, or elsewhere."""
    if path in ("", "???"):
        return "unknown"
    p = path
    if root and not os.path.isabs(p):
        p = os.path.normpath(os.path.join(root, "build", p))
    p = os.path.normpath(p)
    if root and p.startswith(root.rstrip("/") + "/"):
        rel = p[len(root.rstrip("/")) + 1:]
    else:
        rel = p
    if rel.startswith("include/cordma/") or "/include/cordma/" in p:
        return "cordma headers (include/cordma/)"
    if rel.startswith("lib/"):
        return "cordma library (lib/)"
    if rel.startswith("bench/"):
        return "benchmark harness (bench/)"
    if "/c++/" in p or "/bits/" in p:
        return "libstdc++ headers (inlined)"
    if "/infiniband/" in p:
        return "verbs.h (inlined)"
    if "liburing" in p:
        return "liburing.h (inlined)"
    return "other headers"


class Run:
    def __init__(self):
        self.total = 0           # the totals:/summary: line, Ir
        self.self_cost = {}      # (ob, fn) -> Ir
        self.calls = {}          # (cob, cfn) -> calls
        self.edges = {}          # (caller fn, cfn) -> calls
        self.by_source = {}      # (ob, source file) -> Ir, self cost
        self.by_line = {}        # (ob, fn, source file, line) -> Ir, self cost
        self.inclusive = {}      # (cob, cfn) -> Ir of all calls into it, callees included
        self.fn_file = {}        # (ob, fn) -> the function's file (fl=)
        self.trigger = ""        # desc: Trigger:
        self.thread = None       # thread: (with --separate-threads=yes)


def parse(path):
    run = Run()
    names = {"ob": {}, "fl": {}, "fn": {}}
    kind_of = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
               "fn": "fn", "cfn": "fn"}
    ir_index = 0
    npos = 1
    line_index = 0           # which position is the source line
    last = [0]               # the previous self cost line's positions
    ob = fl = fn = ""
    cur_file = ""
    cob = cfn = None
    pending_call = False
    pending_target = None
    summed = 0

    def name(kind, value):
        value = value.strip()
        table = names[kind_of[kind]]
        if value.startswith("("):
            close = value.index(")")
            ident = value[1:close]
            rest = value[close + 1:].strip()
            if rest:
                table[ident] = rest
                return rest
            return table.get(ident, "(%s)" % ident)
        return value

    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                costs = parts[npos:]
                ir = int(costs[ir_index]) if len(costs) > ir_index else 0
                if pending_call:
                    # The call's inclusive cost: not self cost. Its position
                    # is relative to the previous self cost line, and (as
                    # callgrind writes it, dump.c's fprint_jcc) does not
                    # become the previous position itself.
                    pending_call = False
                    run.inclusive[pending_target] = run.inclusive.get(pending_target, 0) + ir
                    continue
                pos = []
                for i, tok in enumerate(parts[:npos]):
                    prev = last[i] if i < len(last) else 0
                    if tok == "*":
                        pos.append(prev)
                    elif tok[0] in "+-":
                        pos.append(prev + int(tok))
                    else:
                        pos.append(int(tok, 0))
                last = pos
                lkey = (ob, fn, cur_file, pos[line_index] if line_index < len(pos) else 0)
                run.by_line[lkey] = run.by_line.get(lkey, 0) + ir
                key = (ob, fn)
                run.self_cost[key] = run.self_cost.get(key, 0) + ir
                skey = (ob, cur_file)
                run.by_source[skey] = run.by_source.get(skey, 0) + ir
                summed += ir
                continue
            if "=" in line:
                key, _, value = line.partition("=")
                if key == "ob":
                    ob = name("ob", value)
                elif key == "fl":
                    fl = name("fl", value)
                    cur_file = fl
                elif key in ("fi", "fe"):
                    cur_file = name(key, value)
                elif key == "fn":
                    fn = name("fn", value)
                    cur_file = fl
                    run.fn_file.setdefault((ob, fn), fl)
                elif key == "cob":
                    cob = name("cob", value)
                elif key in ("cfi", "cfl"):
                    name(key, value)
                elif key == "cfn":
                    cfn = name("cfn", value)
                elif key == "calls":
                    count = int(value.split()[0])
                    target = (cob if cob is not None else ob, cfn if cfn is not None else fn)
                    run.calls[target] = run.calls.get(target, 0) + count
                    pending_target = target
                    edge = (fn, target[1])
                    run.edges[edge] = run.edges.get(edge, 0) + count
                    cob = cfn = None
                    pending_call = True
                elif key in ("jump", "jcnd"):
                    pass
                continue
            if ":" in line:
                key, _, value = line.partition(":")
                value = value.strip()
                if key == "desc" and value.startswith("Trigger:"):
                    run.trigger = value[len("Trigger:"):].strip()
                elif key == "thread":
                    run.thread = int(value)
                elif key == "events":
                    events = value.split()
                    ir_index = events.index("Ir") if "Ir" in events else 0
                elif key == "positions":
                    npos = len(value.split())
                    line_index = value.split().index("line") if "line" in value.split() else 0
                elif key in ("totals", "summary"):
                    nums = value.split()
                    if len(nums) > ir_index:
                        run.total = max(run.total, int(nums[ir_index]))
    if run.total == 0:
        run.total = summed
    run.summed = summed
    return run


def alloc_counts(run):
    out = {"allocations": 0, "operator_new": 0, "frees": 0, "operator_delete": 0}
    for (caller, cfn), n in run.edges.items():
        if caller in ALLOC_FUNCTIONS or caller in FREE_FUNCTIONS:
            continue
        if cfn in ALLOC_FUNCTIONS:
            out["allocations"] += n
        elif cfn in FREE_FUNCTIONS:
            out["frees"] += n
        elif NEW_RE.match(cfn) and not NEW_RE.match(caller):
            out["operator_new"] += n
        elif DELETE_RE.match(cfn) and not DELETE_RE.match(caller):
            out["operator_delete"] += n
    return out


def summarize_run(run, root):
    groups = {g: 0 for g in GROUP_ORDER}
    objects = {}
    for (ob, fn), ir in run.self_cost.items():
        groups[object_group(ob)] += ir
        objects[ob] = objects.get(ob, 0) + ir
    sources = {}
    for (ob, path), ir in run.by_source.items():
        if object_group(ob) == "cordma":
            k = source_kind(path, root)
            sources[k] = sources.get(k, 0) + ir
    return {"total": run.total, "self_sum": run.summed, "groups": groups, "objects": objects,
            "cordma_by_source": sources, "allocs": alloc_counts(run)}


def diff(a, b, scale):
    """(b - a) / scale for numbers and, key by key, for dicts."""
    if isinstance(a, dict) or isinstance(b, dict):
        a = a or {}
        b = b or {}
        return {k: diff(a.get(k, 0), b.get(k, 0), scale) for k in dict.fromkeys(list(a) + list(b))}
    return (b - a) / scale


def short_fn(fn, width=110):
    return fn if len(fn) <= width else fn[:width - 1] + "…"


def per_write(short, long_, n_short, n_long, root):
    """Everything per write from one pair of runs."""
    writes = n_long - n_short
    s, l = summarize_run(short, root), summarize_run(long_, root)
    result = {
        "writes": writes,
        "total": diff(s["total"], l["total"], writes),
        "groups": diff(s["groups"], l["groups"], writes),
        "objects": diff(s["objects"], l["objects"], writes),
        "cordma_by_source": diff(s["cordma_by_source"], l["cordma_by_source"], writes),
        "allocs": diff(s["allocs"], l["allocs"], writes),
    }
    fns = {}
    for key in set(short.self_cost) | set(long_.self_cost):
        d = (long_.self_cost.get(key, 0) - short.self_cost.get(key, 0)) / writes
        calls = (long_.calls.get(key, 0) - short.calls.get(key, 0)) / writes
        if abs(d) >= 0.005 or abs(calls) >= 0.005:
            ob, fn = key
            fns[key] = {"object": os.path.basename(ob), "group": object_group(ob), "function": fn,
                        "file": rel_path(long_.fn_file.get(key, short.fn_file.get(key, "")), root),
                        "self_per_write": d, "calls_per_write": calls}
    for key, f in fns.items():
        if key in long_.inclusive or key in short.inclusive:
            f["inclusive_per_write"] = (long_.inclusive.get(key, 0) - short.inclusive.get(key, 0)) / writes
    # Ties in a fixed order (a set's order changes from one Python run to the next).
    result["functions"] = sorted(fns.values(), key=lambda f: (-f["self_per_write"], f["object"], f["function"]))
    lines = []
    for key in set(short.by_line) | set(long_.by_line):
        ob, fn, path, line = key
        if object_group(ob) != "cordma":
            continue
        d = (long_.by_line.get(key, 0) - short.by_line.get(key, 0)) / writes
        if abs(d) >= 0.005:
            lines.append({"object": os.path.basename(ob), "function": fn, "file": rel_path(path, root), "line": line,
                          "source": source_kind(path, root), "self_per_write": d})
    result["cordma_lines"] = sorted(lines, key=lambda l: (-l["self_per_write"], l["file"], l["line"], l["function"]))
    files = {}
    for l in lines:
        where = source_where(l["file"], 0, root).rsplit(":", 1)[0]
        files[where] = files.get(where, 0) + l["self_per_write"]
    result["cordma_files"] = dict(sorted(files.items(), key=lambda kv: (-kv[1], kv[0])))
    return result


def spread(values):
    values = list(values)
    if not values:
        return {}
    return {"min": min(values), "max": max(values), "median": statistics.median(values),
            "range": max(values) - min(values)}


def fmt(x, digits=1):
    if abs(x) < 0.05 and digits == 1:
        return "0" if abs(x) < 1e-9 else f"{x:.2f}"
    return f"{x:,.{digits}f}"


def resolve(path, root):
    """An absolute path for a source file named as callgrind names it
    (absolute, or relative to the build directory) or relative to the
    repository."""
    if root and not os.path.isabs(path):
        for candidate in (os.path.join(root, path), os.path.join(root, "build", path)):
            if os.path.exists(candidate):
                return os.path.normpath(candidate)
    return os.path.normpath(path)


def rel_path(path, root):
    """A source file's path, relative to the repository when it is in it."""
    if path in ("", "???"):
        return path
    p = resolve(path, root)
    if root and p.startswith(root.rstrip("/") + "/"):
        p = p[len(root.rstrip("/")) + 1:]
    return p


def source_where(path, line, root):
    return f"{rel_path(path, root)}:{line}"


def source_text(path, line, root):
    try:
        with open(resolve(path, root), errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    text = " ".join(text.split())
                    return text if len(text) <= 90 else text[:89] + "…"
    except OSError:
        pass
    return ""


def cmd_parse(args):
    for path in args.files:
        run = parse(path)
        s = summarize_run(run, args.root)
        s["file"] = path
        top = sorted(run.self_cost.items(), key=lambda kv: (-kv[1], kv[0]))[:args.top]
        s["top"] = [{"object": os.path.basename(ob), "function": fn, "self": ir} for (ob, fn), ir in top]
        json.dump(s, sys.stdout, indent=1)
        print()


PASS_FUNCTION = re.compile(r"^cordma::event_listener::drain_all\(")


def dump_files(work, out):
    """Every dump of one run (all threads, all parts): name -> (thread, part
    trigger, totals), read from the files' headers and totals lines."""
    files = {}
    for path in sorted(glob.glob(os.path.join(work, out + "*"))):
        if path.endswith((".log", ".stdout", ".stderr")):
            continue
        thread, trigger, totals = None, "", 0
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("thread:"):
                    thread = int(line.split(":", 1)[1])
                elif line.startswith("desc: Trigger:"):
                    trigger = line.split(":", 2)[2].strip()
                elif line.startswith("totals:"):
                    totals = int(line.split()[1])
        files[os.path.basename(path)] = {"thread": thread, "trigger": trigger[:80], "totals": totals}
    return files


def cmd_report(args):
    runs = [json.loads(line) for line in open(os.path.join(args.work, "runs.jsonl")) if line.strip()]
    meta = json.load(open(os.path.join(args.work, "meta.json")))
    parsed = {}
    problems = []
    for r in runs:
        run = parse(os.path.join(args.work, r["measured"]))
        if run.summed != run.total:
            problems.append(f"{r['measured']}: self costs sum to {run.summed}, totals say {run.total}")
        r["dumps"] = dump_files(args.work, r["out"])
        parsed[(r["test"], r["rep"], r["iters"])] = run
    n1, n2 = meta["iters"]
    result = {"name": args.name, "date": datetime.date.today().isoformat(), "meta": meta,
              "method": "(Ir(n2) - Ir(n1)) / (n2 - n1), Ir = user-space instructions executed (callgrind) "
                        "by the event listener thread in the measured phase (its dump at make_result), "
                        "the two runs differing only in -n",
              "problems": problems, "tests": []}
    for test in meta["tests"]:
        reps = []
        for rep in range(1, meta["reps"] + 1):
            a, b = parsed.get((test, rep, n1)), parsed.get((test, rep, n2))
            if a is None or b is None:
                continue
            pw = per_write(a, b, n1, n2, args.root)
            pw["rep"] = rep
            pw["run_totals"] = {str(n1): a.total, str(n2): b.total}
            passes = [f["calls_per_write"] for f in pw["functions"]
                      if f["group"] == "cordma" and PASS_FUNCTION.match(f["function"])]
            pw["passes_per_write"] = passes[0] if passes else None
            reps.append(pw)
        if not reps:
            continue
        first = reps[0]
        passes = [r["passes_per_write"] for r in reps if r["passes_per_write"] is not None]
        result["tests"].append({
            "test": test,
            "total_per_write": spread(r["total"] for r in reps),
            "cordma_per_write": spread(r["groups"]["cordma"] for r in reps),
            "groups": {g: spread(r["groups"].get(g, 0) for r in reps) for g in GROUP_ORDER},
            "allocations_per_write": spread(r["allocs"]["allocations"] for r in reps),
            "operator_new_per_write": spread(r["allocs"]["operator_new"] for r in reps),
            "frees_per_write": spread(r["allocs"]["frees"] for r in reps),
            "listener_passes_per_write": spread(passes) if passes else None,
            "cordma_by_source": {k: spread(r["cordma_by_source"].get(k, 0) for r in reps)
                                 for k in sorted(set().union(*(r["cordma_by_source"] for r in reps)))},
            "objects": {os.path.basename(k): v for k, v in sorted(first["objects"].items(), key=lambda kv: (-kv[1], kv[0]))
                        if abs(v) >= 0.05},
            "top_cordma_functions": [f for f in first["functions"] if f["group"] == "cordma"][:args.top],
            "cordma_files": {k: spread(r["cordma_files"].get(k, 0) for r in reps)
                             for k in list(first["cordma_files"])[:args.top]},
            "top_cordma_lines": [dict(l, where=source_where(l["file"], l["line"], args.root),
                                      text=source_text(l["file"], l["line"], args.root))
                                 for l in first["cordma_lines"][:args.top]],
            "top_functions_by_group": {g: [f for f in first["functions"] if f["group"] == g][:6]
                                       for g in GROUP_ORDER if g != "cordma"},
            "all_functions": first["functions"],
            "reps": [{"rep": r["rep"], "total": r["total"], "groups": r["groups"], "allocs": r["allocs"],
                      "passes_per_write": r["passes_per_write"], "measured_phase_totals": r["run_totals"]}
                     for r in reps],
        })
    result["runs"] = runs

    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    with open(args.out + ".md", "w") as f:
        f.write(render_md(result, args))
    print(render_summary(result))
    for p in problems:
        print("warning: " + p, file=sys.stderr)


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def range_text(s, digits=1):
    if not s:
        return "-"
    if s["range"] < 10 ** -digits / 2:
        return fmt(s["median"], digits)
    return f"{fmt(s['median'], digits)} ({fmt(s['min'], digits)}–{fmt(s['max'], digits)})"


def render_summary(result):
    lines = []
    for t in result["tests"]:
        g = t["groups"]
        lines.append(f"{t['test']}: {fmt(t['total_per_write']['median'])} instructions per 8 B write in all "
                     f"(range over {plural(len(t['reps']), 'repetition')} {fmt(t['total_per_write']['range'])}); "
                     f"cordma's own {fmt(t['cordma_per_write']['median'])}, "
                     + ", ".join(f"{k} {fmt(g[k]['median'])}" for k in GROUP_ORDER if k != "cordma")
                     + f"; allocations per write {fmt(t['allocations_per_write']['median'], 2)}")
        lines.append("  cordma's top functions (self instructions per write): " +
                     "; ".join(f"{fmt(f['self_per_write'])} {short_fn(f['function'], 60)}"
                               for f in t["top_cordma_functions"][:5]))
    return "\n".join(lines)


def md_escape(text):
    """For a table cell: a pipe would end the cell, even inside a code span."""
    return text.replace("|", "\\|")


def render_md(result, args):
    meta = result["meta"]
    n1, n2 = meta["iters"]
    out = []
    out.append(f"# Instructions per 8 B RDMA write: {result['name']}\n")
    code = meta.get("code_commit")
    code_text = f" (lib/, include/ and cordma-perf as of `{code}`)" if code and code != meta.get("commit") else ""
    out.append(f"Measured {meta.get('date', result['date'])} on {meta.get('where', '?')}; commit "
               f"`{meta.get('commit', '?')}`{code_text}"
               f"{' with uncommitted changes to lib/, include/ or bench/cordma_perf.cpp' if meta.get('dirty') else ''}; "
               f"build type {meta.get('buildtype', '?')}; {meta.get('valgrind', 'valgrind')}. "
               f"{plural(meta['reps'], 'repetition')} of each pair of runs, {meta.get('measuring_seconds', '?')} s of "
               "measuring.\n")
    out.append("**Method.** cordma-perf runs one write at a time (`--loopback --test bw -t 1`: one "
               "coroutine looping on `co_await conn.write(...)`; `--test lat` is the same loop plus a TSC "
               "sample per write) under callgrind. Its event listener thread, where every write is "
               "posted and completed, dumps its counts when the measured phase starts (`run_phase`) and "
               "when it ends (`make_result`), so the dump between holds the measured phase alone: no "
               "set-up, warm-up, statistics or teardown. Each figure is (Ir(n2) − Ir(n1)) / (n2 − n1) of "
               f"that dump, n1 = {n1:,} and n2 = {n2:,} writes, which leaves out the phase's own start and "
               "end. Ir counts user-space instructions only: the kernel's share (the doorbell system "
               "call, rxe's requester, responder and completer) is not in it. Allocations are calls "
               "into malloc, calloc, realloc, aligned_alloc, posix_memalign and memalign.\n")
    out.append("Command, inside the VM (n = n1 and n2, each repetition):\n")
    out.append("    " + meta["command"] + "\n")
    out.append("Issue 15's target: **0 allocations per operation; at most 250 instructions per 8 B write "
               "in cordma's own code**, here libcordma.so and the cordma-perf executable (which holds "
               "the templates of cordma's headers the benchmark instantiates, and the benchmark's loop).\n")
    for p in result.get("problems", []):
        out.append(f"**Warning:** {p}\n")
    for t in result["tests"]:
        out.append(f"## --test {t['test']}\n")
        out.append("| per 8 B write | instructions | target |")
        out.append("| --- | ---: | --- |")
        out.append(f"| **all user space** | **{range_text(t['total_per_write'])}** | |")
        verdict = "met" if t["cordma_per_write"]["max"] <= 250 else "not met"
        out.append(f"| **cordma's own** (libcordma.so + cordma-perf) | **{range_text(t['cordma_per_write'])}** "
                   f"| ≤ 250: {verdict} |")
        for g in GROUP_ORDER[1:]:
            out.append(f"| {g} | {range_text(t['groups'][g])} | |")
        alloc_verdict = "met" if t["allocations_per_write"]["max"] < 0.0005 else "not met"
        out.append(f"| **allocations** | **{range_text(t['allocations_per_write'], 3)}** | 0: {alloc_verdict} |")
        out.append(f"| of them through operator new | {range_text(t['operator_new_per_write'], 3)} | |")
        out.append(f"| frees | {range_text(t['frees_per_write'], 3)} | |")
        out.append("")
        out.append(f"The median over {plural(len(t['reps']), 'repetition')}, with the range in brackets "
                   "where they differ. ")
        objs = ", ".join(f"{k} {fmt(v)}" for k, v in t["objects"].items() if object_group(k) == "other")
        if objs:
            out[-1] += f"Other: {objs}."
        passes = t.get("listener_passes_per_write")
        if passes:
            if passes["max"] <= 1.005:
                out[-1] += (f" The busy listener found a completion on every pass ({fmt(passes['median'], 3)} "
                            "polling passes per write): no empty polls are in these figures.")
            else:
                out[-1] += (f" **The busy listener made {fmt(passes['median'], 2)} polling passes per write**, "
                            "so the figures include empty polls (every CQ polled, io_uring peeked), whose "
                            "number depends on the device's latency, not on cordma's work.")
        out.append("")
        out.append("cordma's own instructions by the source they were compiled from (line info; inlined "
                   "code counts where it was written):\n")
        out.append("| source | instructions per write |")
        out.append("| --- | ---: |")
        for k, sp in sorted(t["cordma_by_source"].items(), key=lambda kv: (-kv[1]["median"], kv[0])):
            if abs(sp["median"]) >= 0.05:
                out.append(f"| {k} | {range_text(sp)} |")
        out.append("")
        out.append("The same by source file (the first " + str(args.top) + "):\n")
        out.append("| file | instructions per write |")
        out.append("| --- | ---: |")
        for k, sp in t["cordma_files"].items():
            if abs(sp["median"]) >= 0.05:
                out.append(f"| {md_escape(k)} | {range_text(sp)} |")
        out.append("")
        out.append(f"Top {args.top} functions of cordma's own code by self instructions per write "
                   "(repetition 1; calls/write counts calls into the function, 0 for code only resumed, "
                   "like a coroutine's body):\n")
        out.append("| self Ir/write | with callees | calls/write | object | function |")
        out.append("| ---: | ---: | ---: | --- | --- |")
        for f in t["top_cordma_functions"]:
            incl = fmt(f["inclusive_per_write"]) if "inclusive_per_write" in f else "-"
            out.append(f"| {fmt(f['self_per_write'])} | {incl} | {fmt(f['calls_per_write'], 2)} | {f['object']} | "
                       f"`{md_escape(short_fn(f['function']))}` |")
        out.append("")
        out.append("\"With callees\" is the cost of the calls into the function, everything they ran "
                   "included, per write: a completion's handling includes resuming the coroutine, which "
                   "posts the next write.\n")
        out.append(f"Top {args.top} source lines of cordma's own code (self Ir per write, repetition 1):\n")
        out.append("| Ir/write | where | in function | line |")
        out.append("| ---: | --- | --- | --- |")
        for l in t["top_cordma_lines"]:
            out.append(f"| {fmt(l['self_per_write'])} | {md_escape(l['where'])} | "
                       f"`{md_escape(short_fn(l['function'], 60))}` | `{md_escape(l['text'])}` |")
        out.append("")
        out.append("Outside cordma, what each object spends it on (self Ir per write, repetition 1; static "
                   "functions of the stripped libibverbs, rxe provider and liburing are named by their "
                   "offset in the object):\n")
        out.append("| object | self Ir/write | calls/write | function |")
        out.append("| --- | ---: | ---: | --- |")
        for g, fns in t["top_functions_by_group"].items():
            for f in fns:
                if abs(f["self_per_write"]) < 0.5:
                    continue
                alias = f" ({ALIASES[f['function']]})" if f["function"] in ALIASES else ""
                out.append(f"| {f['object']} | {fmt(f['self_per_write'])} | {fmt(f['calls_per_write'], 2)} | "
                           f"`{md_escape(short_fn(f['function'], 80))}`{alias} |")
        out.append("")
        out.append("Per repetition (run-to-run variation):\n")
        out.append(f"| repetition | all | cordma | allocations | measured phase, n = {n1:,} | n = {n2:,} |")
        out.append("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in t["reps"]:
            out.append(f"| {r['rep']} | {fmt(r['total'], 2)} | {fmt(r['groups']['cordma'], 2)} | "
                       f"{fmt(r['allocs']['allocations'], 3)} | {r['measured_phase_totals'][str(n1)]:,} | "
                       f"{r['measured_phase_totals'][str(n2)]:,} |")
        out.append("")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("parse")
    pp.add_argument("files", nargs="+")
    pp.add_argument("--root", default="")
    pp.add_argument("--top", type=int, default=20)
    pr = sub.add_parser("report")
    pr.add_argument("--work", required=True)
    pr.add_argument("--out", required=True, help="bench/results/NAME, without .json/.md")
    pr.add_argument("--name", required=True)
    pr.add_argument("--root", default="")
    pr.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    {"parse": cmd_parse, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
