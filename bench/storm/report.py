#!/usr/bin/env python3
"""bench/storm's measurements: one record per run (--record), and the report
(--raw --meta --out): NAME.json with every record, NAME.md with the table.

cmtime prints, per step, the wall time from the first connection starting
it to the last finishing it ("total ms"), the steps running one after the
other for all N connections. Its storm time is the sum of the steps that
set a connection up (or its "full connect" row, where it has one); its
connections per second are N over that. cordma_storm prints one JSON line:
the wall time from the first connect to the last connected (and, for rpc,
called) connection."""
import argparse
import json
import re
import statistics
import sys

SETUP_STEPS = ("create id", "bind addr", "resolve addr", "resolve route", "create qp", "connect")
ROW = re.compile(r"^\s*([a-z][a-z /_-]*?)\s*:\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s*$")


def cmtime_table(lines):
    """The client's first step table: {step: total_ms}."""
    steps, seen = {}, False
    for line in lines:
        if line.startswith("server| "):
            continue
        if line.lstrip().startswith("step"):
            if seen:
                break
            seen = True
            continue
        m = ROW.match(line)
        if seen and m:
            steps[m.group(1).strip()] = float(m.group(2))
        elif seen and steps and not m:
            break
    return steps


def read_lines(path):
    """The file's lines, or none if it was never written (a server that
    never listened leaves its client unrun)."""
    try:
        return [l.rstrip("\n") for l in open(path, errors="replace")]
    except FileNotFoundError:
        return []


def record(args):
    rnd, impl, n, rc, out, err = args
    lines = read_lines(out)
    rec = {"round": int(rnd), "impl": impl, "connections": int(n), "rc": int(rc), "result": None}
    if impl == "cmtime":
        steps = cmtime_table(lines)
        if steps:
            full = next((v for k, v in steps.items() if "full connect" in k), None)
            setup = full if full is not None else sum(v for k, v in steps.items() if k in SETUP_STEPS)
            rec["result"] = {"steps_ms": steps, "wall_ms": round(setup, 2),
                             "per_s": round(int(n) / (setup / 1000.0), 1) if setup > 0 else None,
                             "from": "full connect" if full is not None else "+".join(
                                 k for k in steps if k in SETUP_STEPS)}
    else:
        for line in lines:
            if line.startswith("{"):
                try:
                    rec["result"] = json.loads(line)
                except json.JSONDecodeError:
                    pass
    if rec["rc"] == 0 and rec["result"] is None:
        rec["rc"] = -1
    if rec["rc"] != 0:
        rec["output_tail"] = read_lines(err)[-8:] + lines[-8:]
    print(json.dumps(rec))


def qp_cost_table(path):
    """bench/storm/qp_create_cost's lines: what each QP capacity costs."""
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    if not rows:
        return [], rows
    base = rows[0]["create_ms"]
    lines = ["", f"What a queue pair costs to create on this device by its capacity (bench/storm/qp_create_cost, "
             f"raw verbs, {rows[0]['qps']} QPs each, one after another, in the same boot; ms per QP). A storm "
             "on one host is CPU-bound, and every connection creates two (one each side), so the difference "
             "between the plain and depth-1 rows above is mostly this.", "",
             "| send + recv WRs | SGEs | inline | create ms | vs 1 + 1 | modify to INIT ms | destroy ms | |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['send_wr']} + {r['recv_wr']} | {r['send_sge']}/{r['recv_sge']} | {r['inline']} | "
                     f"{r['create_ms']:.3f} | {r['create_ms'] / base:.1f}x | {r['init_ms']:.3f} | "
                     f"{r['destroy_ms']:.3f} | {r['what']} |")
    return lines, rows


def report(raw, meta, out, qp_cost=None):
    recs = [json.loads(l) for l in open(raw) if l.strip()]
    info = json.load(open(meta))
    cost_lines, cost_rows = qp_cost_table(qp_cost) if qp_cost else ([], [])
    json.dump({"meta": info, "records": recs, "qp_create_cost": cost_rows}, open(out + ".json", "w"), indent=1)
    ok = [r for r in recs if r["rc"] == 0 and r["result"] and r["result"].get("per_s")]
    failed = [r for r in recs if r not in ok]

    def med(impl, n, key="per_s"):
        v = [r["result"][key] for r in ok if r["impl"] == impl and r["connections"] == n]
        return statistics.median(v) if v else None

    def fmt(x, d=0):
        return "-" if x is None else f"{x:.{d}f}"

    def ratio(a, b):
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"

    lines = [f"# Connection storms: cordma beside cmtime ({info['started'][:10]})", "",
             f"{info['rounds']} rounds in one boot of tools/rxe-vm ({info['cpus']} vCPUs, kernel {info['kernel']}, "
             f"rxe0, client and server on one host), rdmacm-utils {info['rdmacm_utils']}; medians over the rounds. "
             "Connections per second: N over the time from the first connect started to the last connected "
             "(cmtime: the sum of its set-up steps).", "",
             "| N | cmtime conn/s | cordma plain conn/s | plain / cmtime | plain, depth 1 conn/s | "
             "depth 1 / cmtime | cordma + agent conn/s | agent / cmtime | rpc connect + call /s | "
             "plain p50 / max ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in info["connections"]:
        c, p, p1, a, r = med("cmtime", n), med("plain", n), med("plain1", n), med("agent", n), med("rpc", n)
        lines.append(f"| {n} | {fmt(c)} | {fmt(p)} | {ratio(p, c)} | {fmt(p1)} | {ratio(p1, c)} | {fmt(a)} | "
                     f"{ratio(a, c)} | {fmt(r)} | "
                     f"{fmt(med('plain', n, 'p50_ms'), 1)} / {fmt(med('plain', n, 'max_ms'), 1)} |")
    lines += ["", "What rxe counted during cordma's storms (the port's hw_counters, client and server together; "
              "medians): packets sent, RNR NAKs sent, completer retries, retries exceeded, sequence errors.", "",
              "| N | kind | packets | RNR NAKs | retries | retries exceeded | sequence errors |",
              "|---:|---|---:|---:|---:|---:|---:|"]
    for n in info["connections"]:
        for kind in ("plain", "plain1", "agent", "rpc"):
            dev = [r["result"]["device"] for r in ok if r["impl"] == kind and r["connections"] == n
                   and "device" in r["result"]]
            if not dev:
                continue
            m = lambda k: fmt(statistics.median(d.get(k, 0) for d in dev))
            lines.append(f"| {n} | {kind} | {m('sent_pkts')} | {m('send_rnr_err')} | {m('completer_retry_err')} | "
                         f"{m('retry_exceeded_err')} | {m('rcvd_seq_err')} |")
    # Rates move with the host from one storm to the next (the VM shares
    # two cores), so each round's cordma rates are also set beside that
    # round's cmtime: the medians of those paired ratios, and the client's
    # CPU time (user + system, every thread) per connection.
    lines += ["", "Each round's rates over the same round's cmtime (median, lowest-highest over the rounds), and "
              "the cordma client's CPU time per connection during the storm (user + system, median):", "",
              "| N | kind | rate / cmtime, paired | lowest-highest | client CPU ms per connection |",
              "|---:|---|---:|---:|---:|"]
    for n in info["connections"]:
        cm = {r["round"]: r["result"]["per_s"] for r in ok if r["impl"] == "cmtime" and r["connections"] == n}
        for kind in ("plain", "plain1", "agent", "rpc"):
            mine = [r for r in ok if r["impl"] == kind and r["connections"] == n]
            paired = [r["result"]["per_s"] / cm[r["round"]] for r in mine if cm.get(r["round"])]
            cpu = [(r["result"]["cpu_user_ms"] + r["result"]["cpu_sys_ms"]) / n for r in mine
                   if "cpu_user_ms" in r["result"]]
            if not paired:
                continue
            lines.append(f"| {n} | {kind} | {statistics.median(paired):.2f}x | {min(paired):.2f}x-{max(paired):.2f}x | "
                         f"{fmt(statistics.median(cpu) if cpu else None, 2)} |")
    spread = []
    for n in info["connections"]:
        for impl in ("cmtime", "plain", "plain1"):
            v = [r["result"]["per_s"] for r in ok if r["impl"] == impl and r["connections"] == n]
            if len(v) > 1:
                spread.append(f"{impl} x{n} {min(v):.0f}-{max(v):.0f}")
    if spread:
        lines += ["", "Spread over the rounds (conn/s, lowest-highest): " + "; ".join(spread) + "."]
    lines += cost_lines
    if failed:
        lines += ["", f"{len(failed)} measurement(s) failed (in {out.split('/')[-1]}.json):"]
        lines += [f"- round {r['round']} {r['impl']} x{r['connections']}: status {r['rc']}" for r in failed]
    open(out + ".md", "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", nargs=6, metavar=("ROUND", "IMPL", "N", "RC", "OUT", "ERR"))
    ap.add_argument("--raw")
    ap.add_argument("--meta")
    ap.add_argument("--out")
    ap.add_argument("--qp-cost", help="qp_create_cost's output (optional)")
    a = ap.parse_args()
    if a.record:
        record(a.record)
    elif a.raw and a.meta and a.out:
        report(a.raw, a.meta, a.out, a.qp_cost)
    else:
        ap.error("--record ..., or --raw, --meta and --out")


if __name__ == "__main__":
    sys.exit(main())
