"""The three programs bench/compare runs, each as a server and a client:
their command lines, how each says it is ready, and how to read its result.

  cordma     build/bench/cordma-perf (server: no HOST; client: HOST:PORT)
  perftest   ib_write_lat, ib_send_lat, ib_write_bw, ib_send_bw
  ucx        ucx_perftest (UCP tests: ucp_put_lat, ucp_am_lat, ucp_put_bw,
             ucp_am_bw), over the same device through UCX's verbs
             transports (UCX_ENV below)

Every parser returns a dict of figures under one set of names, so the
report need not know which program a figure came from:
  p50_us, p99_us       latency, half a round trip (all three report a
                       ping-pong's RTT/2)
  mb_per_s, msg_per_s  bandwidth (MB of 2^20 bytes) and messages per second
  cpu_us_per_op        cordma only
"""

import glob
import json
import math
import os

from pair import ReadyLine, ReadyPort, run_pair

# UCX on Soft-RoCE, found by trying in tools/rxe-vm (bench/README.md):
# - UCX_NET_DEVICES=rxe0:1 keeps UCX on the RDMA device (no TCP);
# - UCX_TLS=rc_v,ud_v: RC over verbs for the data (rxe has no mlx5
#   offload, so rc_mlx5 is not there), UD over verbs for UCP's wireup only;
#   no shared memory (sm, posix, cma), which two processes on one host would
#   otherwise use and bypass the device: RDMA against RDMA;
# - UCX_UD_VERBS_ETH_DGID_CHECK=n: without it UCX drops its own UD wireup
#   packets on rxe as addressed to another GID, and both sides abort after
#   30 s ("UD endpoint ... unhandled timeout error"); UCX_TLS=rc_verbs
#   alone does not wire up at all;
# - UCX_WARN_UNUSED_ENV_VARS=n: no warning line in the output we parse.
def ucx_env(device):
    return {"UCX_NET_DEVICES": f"{device}:1", "UCX_TLS": "rc_v,ud_v", "UCX_UD_VERBS_ETH_DGID_CHECK": "n",
            "UCX_WARN_UNUSED_ENV_VARS": "n"}


def roce_v2_ipv4_gid_index(device, port=1):
    """The GID index perftest needs (-x): RoCE v2 with an IPv4-mapped address."""
    base = f"/sys/class/infiniband/{device}/ports/{port}"
    for path in sorted(glob.glob(f"{base}/gids/*"), key=lambda p: int(os.path.basename(p))):
        index = os.path.basename(path)
        try:
            gid = open(path).read().strip()
            kind = open(f"{base}/gid_attrs/types/{index}").read().strip()
        except OSError:
            continue
        if kind.lower() == "roce v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return int(index)
    return None


class Device:
    """Where everything runs: the RDMA device, an IPv4 address on it, the
    GID index perftest wants, cordma-perf's path."""

    def __init__(self, name, address, gid, cordma_perf):
        self.name, self.address, self.gid, self.cordma_perf = name, address, gid, cordma_perf


# ---------------------------------------------------------------------------
# cordma-perf

def run_cordma(dev, args, port, timeout):
    """args: cordma-perf's measurement options, given to both sides (the
    client's plan wins, as with perftest). Prints JSON on the client."""
    common = [dev.cordma_perf] + args + ["-d", dev.name, "-p", str(port)]
    server = common + ["--bind", dev.address]
    client = common + ["--json", "--quiet", f"{dev.address}:{port}"]
    out, _ = run_pair("cordma-perf", server, client, ReadyLine("listening on"), client_within=timeout)
    return {"server": server, "client": client}, parse_cordma(json.loads(out))


def parse_cordma(doc):
    if doc.get("test") == "idle":
        return {"idle": doc["results"], "polling": doc["polling"], "qps": doc["qps"],
                "idle_seconds": doc["idle_seconds"]}
    r = doc["results"][0]
    if "latency_us" in r:
        if doc.get("latency_basis") != "half":
            raise RuntimeError(f"cordma-perf reported a {doc.get('latency_basis')} round trip, not half")
        return {"p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"],
                "avg_us": r["latency_us"]["avg"]}
    return {"mb_per_s": r["mb_per_s"], "msg_per_s": r["mmsg_per_s"] * 1e6, "cpu_us_per_op": r["cpu_us_per_op"],
            "cpu_utilization": r["cpu_utilization"]}


# ---------------------------------------------------------------------------
# perftest

def run_perftest(dev, args, port, timeout):
    """args: the program and its options (["ib_write_lat", "-s", "8", ...])."""
    common = args + ["-d", dev.name, "-x", str(dev.gid), "-F", "-p", str(port)]
    out, _ = run_pair(args[0], common, common + [dev.address], ReadyPort(port), client_within=timeout)
    return {"server": common, "client": common + [dev.address]}, parse_perftest(out, args[0].endswith("_lat"))


def parse_perftest(text, latency):
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip().startswith("#bytes") or i + 1 >= len(lines):
            continue
        try:
            values = [float(f) for f in lines[i + 1].split()]
        except ValueError:
            break
        if latency and len(values) >= 9:
            # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (usec, RTT/2)
            result = {"p50_us": values[4], "p99_us": values[7], "avg_us": values[5]}
        elif not latency and len(values) >= 5:
            # #bytes #iterations BW_peak BW_average[MB/sec] MsgRate[Mpps]
            result = {"mb_per_s": values[3], "msg_per_s": values[4] * 1e6}
        else:
            break
        # perftest times with the TSC and calibrates its rate first; in a
        # loaded VM that fails now and then ("Correlation coefficient r^2 <
        # 0.9") and every figure comes out inf: worth a retry.
        if not all(math.isfinite(v) for v in result.values()):
            raise RuntimeError("perftest's figures are not finite (its clock calibration failed):\n" +
                               "\n".join(lines[max(0, i - 3):i + 2]))
        return result
    raise RuntimeError("no result table in perftest's output:\n" + "\n".join(lines[-20:]))


# ---------------------------------------------------------------------------
# ucx_perftest

def run_ucx(dev, args, port, timeout):
    """args: the client's test options (["-t", "ucp_put_lat", "-s", "8", ...]);
    the server takes them from the client."""
    server = ["ucx_perftest", "-p", str(port)]
    client = ["ucx_perftest", dev.address, "-p", str(port)] + args
    env = ucx_env(dev.name)
    out, _ = run_pair("ucx_perftest", server, client, ReadyPort(port), env=env, client_within=timeout)
    cmds = {"server": server, "client": client, "env": env}
    return cmds, parse_ucx(out, "lat" in args[args.index("-t") + 1])


def parse_ucx(text, latency):
    # "Final: iters p50 avg_lat overall_lat avg_bw overall_bw avg_mr overall_mr":
    # latency in usec (ping-pongs: RTT/2, the percentile over the last 2048
    # iterations), bandwidth in MB/s of 2^20 bytes, message rate per second.
    for line in text.splitlines():
        if line.startswith("Final:"):
            v = [float(f) for f in line.split()[1:9]]
            if latency:
                return {"p50_us": v[1], "avg_us": v[3]}
            return {"mb_per_s": v[5], "msg_per_s": v[7]}
    raise RuntimeError("no 'Final:' line in ucx_perftest's output:\n" + "\n".join(text.splitlines()[-20:]))


def usable(figures, program):
    """The figures, if every one is a positive number; else an error worth
    a retry (perftest's ib_send_bw has been seen reporting 0.00 MB/s)."""
    bad = {k: v for k, v in figures.items()
           if k.endswith(("_us", "_per_s")) and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)}
    if bad:
        raise RuntimeError(f"{program} reported figures that cannot be right: {bad}")
    return figures


def checked(runner, program):
    def run(dev, args, port, timeout):
        cmds, figures = runner(dev, args, port, timeout)
        return cmds, usable(figures, program)
    return run


RUNNERS = {"cordma": checked(run_cordma, "cordma-perf"), "perftest": checked(run_perftest, "perftest"),
           "ucx": checked(run_ucx, "ucx_perftest")}
