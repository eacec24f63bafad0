"""How the benchmark reports write sizes and figures: shared by
bench/lib/compare_report.py, bench/collectives/report.py and bench/stream/report.py,
so their tables read alike."""


def human(n):
    """A size in bytes as the tables write it: 64 B, 4 KiB, 1 MiB."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def short(n):
    """Tic labels (the plots' panels are narrow): 64, 4K, 1M."""
    for shift, unit in ((20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def fmt(v, digits=1):
    """A figure, or a dash for one that is missing."""
    return "–" if v is None else f"{v:.{digits}f}"
