#!/usr/bin/env python3
"""Scaling benchmark of the local stack: the whole pipeline (`outbox-local demo`) at several sizes.

    scripts/bench-local [--orders 1000,5000,10000] [--timeout SECONDS] [--proof]

For each N it runs `outbox-local demo --orders N --json` (the binary cargo built; run
`cargo build -p outbox-local` first, or use scripts/bench-local, which does) and samples, every
0.5 s, the emulator process (`moto_server.py`, a child of outbox-local) and outbox-local itself:
peak RSS (VmHWM) and CPU seconds (utime + stime of /proc/<pid>/stat). It prints one row per N:
wall time, emulator CPU, emulator peak RSS, outbox-local peak RSS, the demo's `ok`, and the cost
per order relative to the first size (wall and emulator CPU), so "roughly constant per order"
can be read off. Figures are printed, never asserted (timings depend on the machine). A run that
exceeds --timeout is stopped and reported as such. Stdlib only; Linux (/proc).

With --proof it runs `outbox-local proof --orders N --json` (the default fault plan) instead,
and prints, after the table, each run's invariants held, faults injected by kind and seconds
per phase, from the proof's own report.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children(p):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def hwm_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def target_dir():
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT, capture_output=True, text=True, check=True)
    return Path(json.loads(out.stdout)["target_directory"])


def run(binary, n, timeout, proof):
    start = time.monotonic()
    verb = ["proof", "--orders", str(n), "--json"] if proof else ["demo", "--orders", str(n), "--json", "--timeout", str(timeout)]
    proc = subprocess.Popen([str(binary), *verb], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    emu = {"rss": 0.0, "cpu": 0.0}
    local = {"rss": 0.0, "cpu": 0.0}
    timed_out = False
    tty = sys.stderr.isatty()
    shown = 0.0
    while proc.poll() is None:
        if time.monotonic() - start > timeout:
            proc.send_signal(signal.SIGTERM)
            timed_out = True
            break
        local["rss"] = max(local["rss"], hwm_mb(proc.pid))
        local["cpu"] = max(local["cpu"], cpu_s(proc.pid))
        for pid in descendants(proc.pid):
            if "moto_server" in cmdline(pid):
                emu["rss"] = max(emu["rss"], hwm_mb(pid))
                emu["cpu"] = max(emu["cpu"], cpu_s(pid))
        elapsed = time.monotonic() - start
        if tty or elapsed - shown >= 10:  # in a log: a progress line every 10 s
            line = f"  N={n}: {elapsed:6.0f} s, emulator {emu['rss']:6.0f} MB"
            print("\r" + line if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
            shown = elapsed
        time.sleep(0.5)
    out, _ = proc.communicate(timeout=60)
    print(file=sys.stderr)
    wall = time.monotonic() - start
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        report = {}
    return {"n": n, "wall": wall, "emu_cpu": emu["cpu"], "emu_rss": emu["rss"], "local_rss": local["rss"], "ok": report.get("ok"), "timed_out": timed_out, "report": report}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="1000,5000,10000", help="comma-separated sizes (default 1000,5000,10000)")
    parser.add_argument("--timeout", type=int, default=1200, help="longest run, seconds (default 1200)")
    parser.add_argument("--proof", action="store_true", help="run `outbox-local proof` (default fault plan) instead of `demo`")
    args = parser.parse_args()
    sizes = [int(s) for s in args.orders.split(",") if s.strip()]
    binary = target_dir() / "debug" / "outbox-local"
    if not binary.exists():
        sys.exit(f"bench-local: {binary} not found; run `cargo build -p outbox-local` first")
    rows = []
    for n in sizes:
        rows.append(run(binary, n, args.timeout, args.proof))
    first = rows[0]
    print(f"cores: {os.cpu_count()}")
    print("| orders | wall s | emulator CPU s | emulator peak RSS MB | outbox-local peak RSS MB | ok | wall/order vs first | emulator CPU/order vs first |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        wall_ratio = (r["wall"] / r["n"]) / (first["wall"] / first["n"])
        cpu_ratio = (r["emu_cpu"] / r["n"]) / (first["emu_cpu"] / first["n"]) if first["emu_cpu"] else float("nan")
        ok = "timed out" if r["timed_out"] else r["ok"]
        print(f"| {r['n']} | {r['wall']:.0f} | {r['emu_cpu']:.0f} | {r['emu_rss']:.0f} | {r['local_rss']:.0f} | {ok} | {wall_ratio:.2f} | {cpu_ratio:.2f} |")
    if args.proof:
        for r in rows:
            report = r["report"]
            held = sum(1 for i in report.get("invariants", []) if i.get("held"))
            phases = ", ".join(f"{name} {secs:.0f} s" for name, secs in report.get("phases_secs", []))
            kinds = ", ".join(f"{kind} {n}" for kind, n in report.get("faults_by_kind", {}).items())
            print(f"N={r['n']}: invariants held {held}/{len(report.get('invariants', []))}; faults by kind: {kinds}; phases: {phases}")


if __name__ == "__main__":
    main()
