"""bench/compare's report: from the measuring half's JSON, the medians over
the repetitions, the ratios cordma / perftest and cordma / UCX, and the
issue's targets; writes NAME.json (the summary and every run), NAME.md
(the tables) and NAME.png (latency and bandwidth against size, gnuplot).

A ratio is cordma's median over the other program's; in brackets, the
lowest and highest of the ratios taken repetition by repetition (each
between figures measured minutes apart at most), which shows how much of
a difference is noise.
"""

import json
import os
import statistics
import subprocess
import tempfile

import compare_plan
import host_samples
from report_format import human, short

OTHERS = ("perftest", "ucx")


def stats(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def unusable(result):
    """A result with a figure that cannot be right (0 MB/s): left out."""
    return any(k.endswith(("_us", "_per_s")) and not v > 0 for k, v in result.items() if isinstance(v, (int, float)))


def collect(raw):
    """{(group, bytes, label): {metric: {rep: value}}}"""
    table = {}
    for r in raw["runs"]:
        if not r["result"] or "idle" in r["result"] or unusable(r["result"]):
            continue
        cell = table.setdefault((r["group"], r["bytes"], r["label"]), {})
        for k, v in r["result"].items():
            if isinstance(v, (int, float)):
                cell.setdefault(k, {})[r["rep"]] = v
    return table


def figure(table, group, size, label, metric):
    by_rep = table.get((group, size, label), {}).get(metric)
    return stats(list(by_rep.values())) if by_rep else None


def ratios(table, group, size, label, other, metric):
    """(ratio of the medians, [ratio in each repetition])"""
    mine = table.get((group, size, label), {}).get(metric, {})
    theirs = table.get((group, size, other), {}).get(metric, {})
    per_rep = [mine[k] / theirs[k] for k in sorted(mine) if k in theirs and theirs[k]]
    if not mine or not theirs:
        return None, per_rep
    m, t = statistics.median(mine.values()), statistics.median(theirs.values())
    return (m / t if t else None), per_rep


def meets(ratio, target, lower_is_better):
    if ratio is None or target is None:
        return None
    return ratio <= target if lower_is_better else ratio >= target


def targeted(section, size):
    return section.get("target_from", 0) <= size <= section.get("target_to", 1 << 62)


def rows_of(raw, table):
    sizes = {}
    for r in raw["runs"]:
        sizes.setdefault(r["group"], [])
        if r["bytes"] not in sizes[r["group"]]:
            sizes[r["group"]].append(r["bytes"])
    rows = []
    for sec in compare_plan.SECTIONS:
        g, metric = sec["group"], sec["metric"]
        for size in sorted(sizes.get(g, [])):
            comparisons = [("perftest", "perftest", "ucx")]
            if "perftest_post_list" in sec["names"]:
                comparisons.append(("perftest_post_list", "perftest_post_list", None))
            for n, (perftest_label, name_key, ucx_label) in enumerate(comparisons):
                row = {"group": g, "bytes": size, "title": sec["title"], "unit": sec["unit"], "metric": metric,
                       "lower_is_better": sec["lower_is_better"], "cordma_name": sec["names"]["cordma"],
                       "perftest_name": sec["names"][name_key], "ucx_name": sec["names"]["ucx"] if ucx_label else None,
                       "cordma": figure(table, g, size, "cordma", metric),
                       "perftest": figure(table, g, size, perftest_label, metric),
                       "ucx": figure(table, g, size, ucx_label, metric) if ucx_label else None}
                for other, label in (("perftest", perftest_label), ("ucx", ucx_label)):
                    if label is None:
                        row[f"ratio_{other}"], row[f"ratio_{other}_per_rep"] = None, []
                        row[f"target_{other}"] = row[f"met_{other}"] = None
                        continue
                    row[f"ratio_{other}"], row[f"ratio_{other}_per_rep"] = ratios(table, g, size, "cordma", label,
                                                                                  metric)
                    target = sec[f"target_{other}"] if targeted(sec, size) and n == 0 else None
                    row[f"target_{other}"] = target
                    row[f"met_{other}"] = meets(row[f"ratio_{other}"], target, sec["lower_is_better"])
                if metric == "p50_us":
                    row["p99"] = {k: figure(table, g, size, k, "p99_us") for k in ("cordma", "perftest")}
                if metric != "p50_us":
                    row["cordma_cpu_us_per_op"] = figure(table, g, size, "cordma", "cpu_us_per_op")
                rows.append(row)
    return rows


def goals_of(rows, idle, overhead):
    goals = []
    for sec in compare_plan.SECTIONS:
        for other in OTHERS:
            target = sec[f"target_{other}"]
            if target is None:
                continue
            mine = [r for r in rows if r["group"] == sec["group"] and r[f"target_{other}"] is not None]
            measured = [(r[f"ratio_{other}"], r["bytes"]) for r in mine if r[f"ratio_{other}"] is not None]
            worst = (max if sec["lower_is_better"] else min)(measured) if measured else (None, None)
            sizes = sorted({r["bytes"] for r in mine})
            span = human(sizes[0]) if len(sizes) == 1 else (f"{human(sizes[0])} to {human(sizes[-1])}" if sizes else "")
            name = sec["names"]["perftest"] if other == "perftest" else sec["names"]["ucx"]
            goals.append({"goal": f"{sec['title']}, {span}: cordma {'at most' if sec['lower_is_better'] else 'at least'}"
                                  f" {target:.2f}x {name}",
                          "target": target, "worst_ratio": worst[0], "worst_at_bytes": worst[1],
                          "met": (all(r[f"met_{other}"] for r in mine) if mine and len(measured) == len(mine)
                                  else None)})
    for mode in compare_plan.IDLE_MODES:
        m = idle.get(mode)
        if not m:
            continue
        worst = max(max(s["core_percent"]["values"]) for s in m["sides"].values())
        what = ("event polling, idle: under 1% of a core" if mode == "event" else
                "adaptive polling, idle: its spin bounded (under 1% of a core)")
        goals.append({"goal": f"{what} over {m['seconds']} s, -q {m['qps']} connections, both sides",
                      "target": compare_plan.IDLE_TARGET_PERCENT, "worst_percent": worst,
                      "met": worst < compare_plan.IDLE_TARGET_PERCENT})
    slot = max((m for m in (overhead or {}).get("results", []) if m["variant"] == "task+slot"),
               key=lambda m: m["ns_per_op"], default=None)
    if slot:
        goals.append({"goal": "coroutine machinery (task+slot, natively) under 50 ns per operation, 0 allocations",
                      "target": 50, "ns_per_op": slot["ns_per_op"], "allocations_per_op": slot["allocations_per_op"],
                      "met": slot["ns_per_op"] < 50 and slot["allocations_per_op"] == 0})
    return goals


def idle_of(raw):
    """{mode: {"sides": {side: {"core_percent": stats, "wakeups": stats}}, "seconds", "qps"}}"""
    out = {}
    for r in raw["runs"]:
        if r["group"] != "idle" or not r["result"]:
            continue
        res = r["result"]
        m = out.setdefault(res["polling"], {"seconds": res["idle_seconds"], "qps": res["qps"], "sides": {}})
        for s in res["idle"]:
            side = m["sides"].setdefault(s["side"], {"core_percent": [], "wakeups": []})
            side["core_percent"].append(s["core_percent"])
            side["wakeups"].append(s["listener_sleeps"])
    for m in out.values():
        for side in m["sides"].values():
            side["core_percent"] = stats(side["core_percent"])
            side["wakeups"] = stats(side["wakeups"])
    return out


# ---------------------------------------------------------------------------
# Markdown

def number(v, unit):
    if v is None:
        return "–"
    if unit == "msg/s":
        return f"{v:,.0f}"
    return f"{v:.2f}" if unit == "µs" or v < 10 else f"{v:.1f}"


def cell(s, unit):
    if s is None:
        return "–"
    if len(s["values"]) == 1:
        return number(s["median"], unit)
    return f"{number(s['median'], unit)} ({number(s['min'], unit)}–{number(s['max'], unit)})"


def ratio_cell(r, per_rep):
    if r is None:
        return "–"
    if len(per_rep) > 1:
        return f"**{r:.2f}** ({min(per_rep):.2f}–{max(per_rep):.2f})"
    return f"**{r:.2f}**"


def target_cell(row):
    parts = []
    for other, name in (("perftest", "perftest"), ("ucx", "UCX")):
        t = row[f"target_{other}"]
        if t is None:
            continue
        sign = "≤" if row["lower_is_better"] else "≥"
        met = row[f"met_{other}"]
        parts.append(f"{name} {sign} {t:.2f}: {'–' if met is None else ('yes' if met else '**no**')}")
    return "; ".join(parts) if parts else "–"


def row_label(row):
    size = human(row["bytes"])
    if row["group"] == "rate_depth64":
        return f"{size}, vs {row['perftest_name']}"
    return size


def write_markdown(path, s):
    L = [f"# cordma vs perftest vs UCX: {s['name']}", ""]
    where = s["where"] or s["device"]
    L += [f"Measured {s['started']} on {where}; kernel {s['kernel']}, {s['cpus']} CPUs; perftest "
          f"{s['versions']['perftest']}, UCX {s['versions']['ucx']}, rdma-core {s['versions']['rdma-core']}; "
          f"{s['reps']} repetitions, {s['minutes']:.1f} minutes of measuring. Produced by `bench/compare`; every "
          f"run, its command lines and the device's packet count are in `{s['name']}.json`.", ""]
    L += [s["method"], ""]
    hl = s.get("host_load")
    if hl:
        L += [f"Other work on the host while measuring ({hl['samples']} samples, every 5 s): "
              f"{hl['mean_cores_used_by_others']:.2f} cores on average, at most {hl['max_cores_used_by_others']:.2f}; "
              f"at least 0.2 cores in {hl['busy_samples']} samples, another VM in {hl['samples_with_other_vms']}. "
              + ("The host was not quiet: the VM's two vCPUs are its two cores, so figures measured then are "
                 "slower and noisier (the interleaving spreads that over all three programs)."
                 if hl["busy_samples"] else "The host was otherwise quiet."), ""]
    if s["aborted"]:
        L += [f"**Measuring stopped early**: {s['aborted']}", ""]
    if s.get("left_out"):
        L += ["Runs left out of the figures, as what they reported cannot be right (the measuring half now tries "
              "such a run again): " + "; ".join(s["left_out"]) + ".", ""]
    if s["retried"]:
        L += ["Runs that needed more than one attempt (every attempt's error is in the JSON): "
              + "; ".join(s["retried"]) + ".", ""]

    L += ["## Targets (issue 15)", "", "| target | measured | met |", "| --- | --- | --- |"]
    for g in s["goals"]:
        if "worst_percent" in g:
            measured = f"worst {g['worst_percent']:.2f}% of a core"
        elif "ns_per_op" in g:
            measured = f"{g['ns_per_op']:.1f} ns/op, {g['allocations_per_op']:.2f} allocations/op"
        elif g["worst_ratio"] is None:
            measured = "not measured"
        else:
            measured = f"worst {g['worst_ratio']:.3f}x (at {human(g['worst_at_bytes'])})"
        met = "–" if g["met"] is None else ("yes" if g["met"] else "**no**")
        L.append(f"| {g['goal']} | {measured} | {met} |")
    L.append("")

    L += ["## cordma beside perftest and UCX", "",
          "Medians over the repetitions (lowest–highest in brackets). Ratios are cordma's median over the other's, "
          "with the per-repetition ratios' range in brackets: for latency below 1 is better for cordma, for "
          "message rates and bandwidth above 1.", ""]
    for sec in compare_plan.SECTIONS:
        rows = [r for r in s["rows"] if r["group"] == sec["group"]]
        if not rows:
            continue
        first = rows[0]
        L += [f"### {sec['title']} ({sec['unit']})", "",
              f"cordma: `{first['cordma_name']}`; perftest: `{sec['names']['perftest']}`"
              + (f" and `{sec['names']['perftest_post_list']}`" if "perftest_post_list" in sec["names"] else "")
              + f"; UCX: `{sec['names']['ucx']}`.", "",
              "| size | cordma | perftest | UCX | cordma / perftest | cordma / UCX | target: met |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in rows:
            L.append(f"| {row_label(r)} | {cell(r['cordma'], r['unit'])} | {cell(r['perftest'], r['unit'])} | "
                     f"{cell(r['ucx'], r['unit'])} | {ratio_cell(r['ratio_perftest'], r['ratio_perftest_per_rep'])} | "
                     f"{ratio_cell(r['ratio_ucx'], r['ratio_ucx_per_rep'])} | {target_cell(r)} |")
        L.append("")
        if sec["metric"] == "p50_us":
            L += ["p99 (µs; ucx_perftest reports one percentile, its p50):", "",
                  "| size | cordma p99 | perftest p99 |", "| --- | ---: | ---: |"]
            for r in rows:
                L.append(f"| {human(r['bytes'])} | {cell(r['p99']['cordma'], 'µs')} | "
                         f"{cell(r['p99']['perftest'], 'µs')} |")
            L.append("")
        elif any(r.get("cordma_cpu_us_per_op") for r in rows):
            L += ["cordma's process CPU time per operation (µs; the client, every thread): "
                  + ", ".join(f"{row_label(r)} {cell(r['cordma_cpu_us_per_op'], 'µs')}" for r in rows
                              if r["perftest_name"] != sec["names"].get("perftest_post_list")) + ".", ""]

    if s["idle"]:
        L += ["## Idle: connections open, no traffic", "",
              f"`cordma-perf --idle {s['idle_seconds']} -q {s['idle_qps']} --polling MODE`, server and client: "
              f"{s['idle_qps']} data connections and the control connection open, buffers exchanged, then nothing "
              f"for {s['idle_seconds']} s; each side's process CPU time over its window (every thread), as % of "
              "one core, and how often its event listener went to sleep (each sleep ends in a wake-up).", "",
              "| polling | side | CPU, % of one core | listener sleeps in the window |",
              "| --- | --- | ---: | ---: |"]
        for mode, m in s["idle"].items():
            for side, v in m["sides"].items():
                c, w = v["core_percent"], v["wakeups"]
                L.append(f"| {mode} | {side} | {c['median']:.3f} ({c['min']:.3f}–{c['max']:.3f}) | "
                         f"{w['median']:.0f} ({w['min']:.0f}–{w['max']:.0f}) |")
        L.append("")

    checks = s["ucx_transport_checks"]
    if checks:
        L += ["## UCX over the device", "",
              "ucx_perftest ran with " + " ".join(f"`{k}={v}`" for k, v in checks[0]["env"].items()
                                                  if k != "UCX_LOG_LEVEL")
              + ". Before the repetitions, one run of each ping-pong with `UCX_LOG_LEVEL=info` (1,100 round trips "
              "of 8 B, 4 packets each at least) logged UCX's lanes: "
              + "; ".join(f"{c['test']}: " + (", ".join(f"`{x}`" for x in c["lanes"]) or "none logged")
                          + f", {c['device_sent_pkts']} packets on {s['device']}" for c in checks) + ".", ""]
    o = s.get("coroutine_overhead")
    if o:
        L += ["## Coroutine machinery (natively, no device: `coroutine_overhead`)", "",
              "One operation = post to a fake CQ, drain it like `event_listener::drain`, dispatch through "
              "`completion_target`. *task+slot* has cordma's shape (wr_id → work slot → awaiter → resume); "
              "*task+slot+mr* adds the buffer's shared ownership as `connection::write` carries it.", "",
              "| variant | outstanding | ns/op | allocations/op | vs callback |", "| --- | ---: | ---: | ---: | ---: |"]
        for m in o["results"]:
            L.append(f"| {m['variant']} | {m['depth']} | {m['ns_per_op']:.1f} | {m['allocations_per_op']:.2f} | "
                     f"{m['vs_callback']:.2f}x |")
        L.append("")
    L += [f"![latency and bandwidth against size, cordma beside perftest and UCX]({s['name']}.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(L))


# ---------------------------------------------------------------------------
# Plot

def plot(path, s):
    with tempfile.TemporaryDirectory() as tmp:
        def data(name, points):
            p = os.path.join(tmp, name)
            with open(p, "w") as f:
                for pt in points:
                    f.write(" ".join(str(v) for v in pt) + "\n")
            return p

        def panel(groups, ylabel, title, key, yscale):
            lines, sizes, medians = [], set(), []
            for group, dash in groups:
                for i, tool in enumerate(("cordma", "perftest", "ucx")):
                    rows = [r for r in s["rows"] if r["group"] == group and r[tool] is not None]
                    if not rows:
                        continue
                    pts = [(r["bytes"], r[tool]["median"], r[tool]["min"], r[tool]["max"]) for r in rows]
                    sizes.update(p[0] for p in pts)
                    medians += [p[1] for p in pts]
                    name = rows[0][f"{tool}_name"].replace("_", "\\\\_")
                    lines.append(f"'{data(f'{group}-{tool}', pts)}' using 1:2:3:4 with yerrorlines lw 2 "
                                 f"pt {(7, 5, 9)[i]} lc {i + 1} dt {dash} title \"{name}\"")
            if not lines:
                return None
            sizes = sorted(sizes)
            xtics = ", ".join(f'"{short(x)}" {x}' for x in sizes)
            # The y range follows the medians: a repetition a scheduler time
            # slice slower (4 ms p50s in a busy VM) would squash the rest.
            yrange = (f"set yrange [{min(medians) / 1.3}:{max(medians) * 1.6}]" if yscale == "xy" else
                      f"set yrange [0:{max(medians) * 1.35}]")
            return ["unset logscale", f"set logscale {yscale}", yrange, f"set xtics ({xtics})", f"set xrange [{sizes[0] / 1.6}:{sizes[-1] * 1.6}]",
                    "set xlabel 'message size (bytes)'", f"set ylabel '{ylabel}'", f"set title '{title}'",
                    f"set key {key}", "plot " + ", \\\n     ".join(lines)]

        panels = [p for p in (
            panel([("write_lat", 1), ("send_lat", 2)], "microseconds, half round trip",
                  "ping-pong latency p50 (solid: write, dashed: send)", "top left", "xy"),
            panel([("write_bw", 1), ("send_bw", 2)], "MB/s (2^20 bytes)",
                  "bandwidth (solid: write, dashed: send)", "bottom right", "x")) if p]
        if not panels:
            return
        where = "Soft-RoCE in tools/rxe-vm" if s.get("in_rxe_vm") else "the host's device"
        script = [f'set terminal pngcairo size {640 * len(panels)},520 font "sans,10"', f"set output '{path}'",
                  f'set multiplot layout 1,{len(panels)} title "cordma vs perftest vs UCX on {s["device"]} '
                  f'({where}), {s["started"][:10]}; medians of {s["reps"]}, bars: min-max (cut at the frame)"', "set grid"]
        for p in panels:
            script += p
        script.append("unset multiplot")
        sp = os.path.join(tmp, "plot.gp")
        with open(sp, "w") as f:
            f.write("\n".join(script) + "\n")
        done = subprocess.run(["gnuplot", sp], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"compare report: gnuplot failed:\n{done.stderr}")


# ---------------------------------------------------------------------------

METHOD = (
    "All three programs run as a server process and a client process on the same device and address, one "
    "measurement at a time, the client started once its server is ready. Every group (one test at one size) runs "
    "the three back to back, their order rotating between repetitions. Ping-pongs report half the round trip "
    "(all three programs' convention); p50 is perftest's t_typical, cordma-perf's median, ucx_perftest's 50th "
    "percentile (over its last 2,048 iterations). Message rates and bandwidth are the client's, MB = 2^20 bytes. "
    "Polling: perftest and UCX spin; cordma-perf spins too (polling_mode::busy) except a server of one-sided "
    "writes, which sleeps (polling_mode::event) as ib_write_bw's does; ucx_perftest's put_bw server polls its "
    "memory for the last put, so it keeps a vCPU busy where the other two servers sleep. UCX's -O is a limit on "
    "incomplete requests, and a short put completes locally at once (UCX copies it): ucp_put_bw -O 1 is not one "
    "write in flight, as ib_write_bw -t 1 and cordma -t 1 are. On Soft-RoCE in a TCG VM absolute figures are "
    "several times native and drift with the host's load; read the ratios.")


def report(opts):
    raw = json.load(open(opts.raw))
    overhead = (json.load(open(opts.overhead)) if opts.overhead and os.path.exists(opts.overhead)
                else raw.get("coroutine_overhead"))
    table = collect(raw)
    rows = rows_of(raw, table)
    idle = idle_of(raw)
    host_load = host_samples.summarize(opts.host_load) if opts.host_load else None
    if host_load:
        for r in raw["runs"]:
            r["host_cores_used_by_others"] = host_samples.around(host_load, r["started"], r["started"] + r["seconds"])
    else:
        host_load = raw.get("host_load")  # a report made again from a report's JSON keeps what it said
    retried = [f"rep {r['rep']} {r['group']} {human(r['bytes'])} {r['label']} ({len(r['errors'])} failed: "
               f"{r['errors'][-1].splitlines()[0][:120]})" for r in raw["runs"] if r["errors"]]
    left_out = [f"rep {r['rep']} {r['group']} {human(r['bytes'])} {r['label']}: "
                + ", ".join(f"{k} {v}" for k, v in r["result"].items() if isinstance(v, (int, float)))
                for r in raw["runs"] if r["result"] and "idle" not in r["result"] and unusable(r["result"])]
    summary = {
        "name": os.path.basename(opts.out), "where": opts.where or raw.get("where", ""),
        **{k: raw[k] for k in ("device", "address", "kernel", "cpus", "in_rxe_vm", "versions", "started", "minutes",
                               "reps", "lat_sizes", "bw_sizes", "lat_iters", "rate_iters", "idle_seconds",
                               "idle_qps", "post_list", "depth", "ucx_transport_checks", "aborted")},
        "method": METHOD, "goals": goals_of(rows, idle, overhead), "rows": rows, "idle": idle, "retried": retried, "left_out": left_out,
        "coroutine_overhead": overhead,
        "host_load": {k: v for k, v in (host_load or {}).items() if k != "raw"} or None,
        "runs": raw["runs"],
    }
    with open(opts.out + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    write_markdown(opts.out + ".md", summary)
    plot(opts.out + ".png", summary)
    return 0
