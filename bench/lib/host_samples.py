"""Reads bench/stream/host_load.py's samples (one line every 5 s while a
benchmark measures: "epoch cores_used_by_others other_qemus") into the
summary the reports print: how busy the host was with work not ours."""

import statistics


def summarize(path):
    """None if there are no samples."""
    samples = []
    try:
        lines = open(path).read().splitlines()
    except (OSError, TypeError):
        return None
    for line in lines:
        f = line.split()
        try:
            samples.append((int(f[0]), float(f[1]), int(f[2])))
        except (ValueError, IndexError):
            continue
    if not samples:
        return None
    cores = [c for _, c, _ in samples]
    return {"raw": samples, "samples": len(samples), "mean_cores_used_by_others": round(statistics.mean(cores), 2),
            "max_cores_used_by_others": round(max(cores), 2), "busy_samples": sum(1 for c in cores if c >= 0.2),
            "samples_with_other_vms": sum(1 for _, _, q in samples if q > 0)}


def around(summary, t0, t1):
    """Mean cores used by others in the samples from t0 to t1 + 5 s (None
    if none fell there)."""
    near = [c for t, c, _ in summary["raw"] if t0 <= t <= t1 + 5] if summary else []
    return round(statistics.mean(near), 2) if near else None
