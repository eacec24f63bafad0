"""What bench/compare measures: each row of the comparison, the same test
run by cordma-perf, perftest and ucx_perftest with matching parameters,
and the target issue 15 sets for it.

A group is one test at one size. Its runs (one per program, two for
perftest at depth 64) follow each other directly, the order rotating
between repetitions, so that every program goes first, second and last
equally often and drift on the host falls on all of them alike.

Like with like:
- Ping-pongs: all three bounce one message between two processes and
  report half the round trip. cordma-perf --op write is ib_write_lat's
  ping-pong (each side RDMA-writes into the other's buffer and polls the
  last byte of its own); ucp_put_lat is the same with ucp_put. --op send is
  ib_send_lat's (each side answers when its receive completes); UCX's
  nearest is ucp_am_lat, an active-message ping-pong.
- Depth 1: one write in flight, the next posted when its completion is
  in (ib_write_bw -t 1; cordma -t 1). ucp_put_bw -O 1 allows one
  incomplete request, but a short put completes locally at once (UCX
  copies it), so UCX is not held to one in flight: the figure is UCX's
  best, not a like-for-like depth 1 (the report says so).
- Depth 64: cordma keeps 64 writes in flight; the issue's yardstick is
  ib_write_bw with its defaults (128 in flight, a completion asked for
  every 100 writes), and --post_list POST_LIST (that many writes per
  ibv_post_send, a completion per list) shows perftest with batched
  doorbells; UCX at -O 64.
- Bandwidth: the same, at 64 KiB and 1 MiB, for writes (ib_write_bw,
  ucp_put_bw) and for sends (ib_send_bw, ucp_am_bw, which takes
  rendezvous above its eager size).
- Idle: cordma alone (perftest and UCX have no such mode): -q IDLE_QPS
  connections open and no traffic for IDLE_SECONDS, each side's process
  CPU time over the window, with --polling event and adaptive.
"""

POST_LIST = 16      # -l for ib_write_bw: divides 128 (its queue) and 64; 8 lists of 16 fill the queue
DEPTH = 64          # cordma's and UCX's writes in flight in rate and bandwidth rows
IDLE_QPS = 8
IDLE_MODES = ("event", "adaptive")

# Sections of the report, in order: what the rows are, their unit, which
# figure is the headline, whether lower is better, and the targets
# (ratio of cordma over the named program; None: the issue sets none).
SECTIONS = [
    {"group": "write_lat", "title": "Write ping-pong, p50, half round trip", "unit": "µs", "metric": "p50_us",
     "lower_is_better": True, "target_perftest": 1.02, "target_ucx": 1.0, "target_from": 8, "target_to": 4096,
     "names": {"cordma": "cordma-perf --op write", "perftest": "ib_write_lat", "ucx": "ucp_put_lat"}},
    {"group": "send_lat", "title": "Send ping-pong, p50, half round trip", "unit": "µs", "metric": "p50_us",
     "lower_is_better": True, "target_perftest": None, "target_ucx": None,
     "names": {"cordma": "cordma-perf --op send", "perftest": "ib_send_lat", "ucx": "ucp_am_lat"}},
    {"group": "rate_depth1", "title": "Write message rate, one at a time", "unit": "msg/s", "metric": "msg_per_s",
     "lower_is_better": False, "target_perftest": 0.95, "target_ucx": 1.0,
     "names": {"cordma": "cordma-perf --test bw -t 1", "perftest": "ib_write_bw -t 1", "ucx": "ucp_put_bw -O 1"}},
    {"group": "rate_depth64", "title": f"Write message rate, depth {DEPTH}", "unit": "msg/s", "metric": "msg_per_s",
     "lower_is_better": False, "target_perftest": 1.2, "target_ucx": 1.0,
     "names": {"cordma": f"cordma-perf --test bw -t {DEPTH}", "perftest": "ib_write_bw (defaults)",
               "perftest_post_list": f"ib_write_bw --post_list {POST_LIST}", "ucx": f"ucp_put_bw -O {DEPTH}"}},
    {"group": "write_bw", "title": "Write bandwidth", "unit": "MB/s", "metric": "mb_per_s",
     "lower_is_better": False, "target_perftest": 0.98, "target_ucx": 1.0, "target_from": 65536,
     "names": {"cordma": f"cordma-perf --test bw -t {DEPTH}", "perftest": "ib_write_bw (defaults)",
               "ucx": f"ucp_put_bw -O {DEPTH}"}},
    {"group": "send_bw", "title": "Send bandwidth", "unit": "MB/s", "metric": "mb_per_s",
     "lower_is_better": False, "target_perftest": None, "target_ucx": None,
     "names": {"cordma": f"cordma-perf --op send --test bw -t {DEPTH}", "perftest": "ib_send_bw (defaults)",
               "ucx": f"ucp_am_bw -O {DEPTH}"}},
]
IDLE_TARGET_PERCENT = 1.0


def latency_iterations(size, iters):
    return max(200, min(iters, (256 << 20) // size))


def bandwidth_iterations(size):
    """About 64 MiB a run (1.2 s at rxe's 53 MB/s in the VM), 128 to 20,000."""
    return max(128, min(20000, (64 << 20) // size))


def plan(lat_sizes, bw_sizes, lat_iters, rate_iters, idle_seconds):
    groups = []

    def group(name, size, runs):
        groups.append({"group": name, "bytes": size, "runs": runs})

    def run(tool, label, args):
        return {"tool": tool, "label": label, "args": args}

    for size in lat_sizes:
        n = latency_iterations(size, lat_iters)
        w = min(1000, n // 10)
        s, ns = str(size), str(n)
        group("write_lat", size, [
            run("cordma", "cordma", ["--op", "write", "--test", "lat", "-s", s, "-n", ns, "--warmup", str(w)]),
            run("perftest", "perftest", ["ib_write_lat", "-s", s, "-n", ns]),
            run("ucx", "ucx", ["-t", "ucp_put_lat", "-s", s, "-n", ns, "-w", str(w)])])
        group("send_lat", size, [
            run("cordma", "cordma", ["--op", "send", "--test", "lat", "-s", s, "-n", ns, "--warmup", str(w)]),
            run("perftest", "perftest", ["ib_send_lat", "-s", s, "-n", ns]),
            run("ucx", "ucx", ["-t", "ucp_am_lat", "-s", s, "-n", ns, "-w", str(w)])])

    n, w = str(rate_iters), str(min(1000, rate_iters // 10))
    assert rate_iters % POST_LIST == 0
    group("rate_depth1", 8, [
        run("cordma", "cordma", ["--op", "write", "--test", "bw", "-s", "8", "-t", "1", "-n", n, "--warmup", w]),
        run("perftest", "perftest", ["ib_write_bw", "-s", "8", "-t", "1", "-n", n]),
        run("ucx", "ucx", ["-t", "ucp_put_bw", "-s", "8", "-n", n, "-w", w, "-O", "1"])])
    group("rate_depth64", 64, [
        run("cordma", "cordma", ["--op", "write", "--test", "bw", "-s", "64", "-t", str(DEPTH), "-n", n,
                                 "--warmup", w]),
        run("perftest", "perftest", ["ib_write_bw", "-s", "64", "-n", n]),
        run("perftest", "perftest_post_list", ["ib_write_bw", "-s", "64", "-n", n, "--post_list", str(POST_LIST)]),
        run("ucx", "ucx", ["-t", "ucp_put_bw", "-s", "64", "-n", n, "-w", w, "-O", str(DEPTH)])])

    for size in bw_sizes:
        n = bandwidth_iterations(size)
        s, ns, w = str(size), str(n), str(max(1, n // 10))
        group("write_bw", size, [
            run("cordma", "cordma", ["--op", "write", "--test", "bw", "-s", s, "-t", str(DEPTH), "-n", ns,
                                     "--warmup", w]),
            run("perftest", "perftest", ["ib_write_bw", "-s", s, "-n", ns]),
            run("ucx", "ucx", ["-t", "ucp_put_bw", "-s", s, "-n", ns, "-w", w, "-O", str(DEPTH)])])
        group("send_bw", size, [
            run("cordma", "cordma", ["--op", "send", "--test", "bw", "-s", s, "-t", str(DEPTH), "-n", ns,
                                     "--warmup", w]),
            run("perftest", "perftest", ["ib_send_bw", "-s", s, "-n", ns]),
            run("ucx", "ucx", ["-t", "ucp_am_bw", "-s", s, "-n", ns, "-w", w, "-O", str(DEPTH)])])

    if idle_seconds > 0:
        group("idle", 0, [run("cordma", f"cordma {mode}", ["--idle", str(idle_seconds), "-q", str(IDLE_QPS),
                                                            "--polling", mode]) for mode in IDLE_MODES])
    return groups


def rotated(runs, rep):
    """The group's runs in repetition rep's order (1-based): rotated by one
    each time, so each program takes each place in turn."""
    k = (rep - 1) % len(runs)
    return runs[k:] + runs[:k]
