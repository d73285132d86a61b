"""Turn the benchmark's JSON results into the tables of docs/performance.md (Markdown) and a
plot (PNG)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


#: The goal for streamed batch lookups over gRPC (QueryColumns), lookups per second: issue 12's
#: (the asyncio server; issue 9's goal was 300,000).
STREAM_GOAL = 700_000


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "—"
    return f"{a / b:.2f}x"


def _rounds(ratios: list[float] | None) -> str:
    """`` (median of R alternating rounds: a, b, c)`` for the ratios of each round, or ``""``
    for results measured in one round."""
    if not ratios:
        return ""
    shown = ", ".join(f"{r:.2f}x" for r in ratios)
    return f" (median of {len(ratios)} alternating rounds; per round: {shown})"


def _median_ratio(grpc: dict[str, Any], ours: str, figure: str, echo: str) -> str:
    """The median of the per-round ratios of ``figure`` (ours / echo) when the run had
    alternating rounds, else the ratio of the two figures."""
    ratios = grpc.get(ours, {}).get("p50_ratios" if figure == "p50_ms" else "calls_ratios")
    if ratios:
        return f"{statistics.median(ratios):.2f}x"
    return _ratio(grpc[ours][figure], grpc[echo][figure])


def _power(n: int) -> str:
    exponent = len(str(n)) - 1
    return f"10^{exponent}" if n == 10**exponent else f"{n:,}"


def render(payload: dict[str, Any], scale: dict[str, Any] | None) -> str:
    results = payload["results"]
    m = payload["machine"]
    by = {(r["system"], r["n"]): r for r in results if "n" in r}
    sizes = sorted({r["n"] for r in results if r["system"].startswith("permindex")})
    designs = sorted(
        {r["system"] for r in results if r["system"].startswith("permindex")},
        key=lambda s: s.count(","),
    )
    lines: list[str] = []
    lines.append(
        f"Measured on {m['cpu']} ({m['cores']} cores, {m['memory_gib']} GiB), Python "
        f"{m['python']}, numpy {m['numpy']}, {m['date']}; load average at the start "
        f"{m['load_average_at_start']} (a shared machine: compare ratios from the same run). "
        "Random 64-bit fingerprints (1% planted near-duplicates), k = 3, 10,000 queries of which "
        "half have a stored neighbour at distance 0-3; permindex and faiss on one thread "
        "(the 2-thread column beside: permindex, two Python threads each calling query_many on "
        "every other query; faiss, its OpenMP set to 2 threads); medians of repeats. "
        '"checked (wrong)": queries whose answer was compared with numpy brute force (how many '
        "differed). Regenerate with `.venv/bin/pip install -e '.[bench]'` (faiss-cpu, "
        "matplotlib; the two simhash peers install apart, see `benchmarks/run.py`), then "
        "`.venv/bin/python benchmarks/run.py` (about 30 minutes on a quiet machine; it rewrites "
        "this section of docs/performance.md and its plot, `--no-docs` leaves them alone)."
    )
    lines.append("")
    lines.append(
        "| system | N | batch q/s | 2 threads | one per call q/s | bytes/fp | keys B/key "
        "| build s | checked (wrong) |"
    )
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        if ("batch_qps" not in r and "single_qps" not in r) or r["system"] == "head to head":
            continue
        lines.append(
            f"| {r['system']} | {_power(r['n'])} | {_fmt(r.get('batch_qps'))} "
            f"| {_fmt(r.get('batch_qps_2threads'))} | {_fmt(r.get('single_qps'))} "
            f"| {_fmt(r.get('bytes_per_fp'), 1)} | {_fmt(r.get('key_bytes_per_key'), 1)} "
            f"| {_fmt(r.get('build_s'), 2)} | {r.get('checked', '—')} ({r.get('wrong', '—')}) |"
        )
    lines.append("")
    lines.append(
        'Targets of issue 13 ("Toward the machine\'s limit"; its goals in the last column, '
        "beside those of earlier issues the table keeps: unary p50 and 4 clients from issue 12, "
        "all pairs and the per-design rows from before; c1b4e0d is main when issue 13 was "
        "filed), as ratios from this run. Lookups against faiss: both indexes "
        "held by one process and timed in alternating rounds (the median of the per-round "
        "ratios; in a round, each system's best of 3 runs), so that the machine's load falls "
        "on both alike; the ratios of the rows above, measured in separate processes at "
        "different times, beside them. The first query_many after the build is compared with "
        "the next on queries not asked before (the same make-up), so that the second does not "
        "find the first one's buckets in the cache."
    )
    lines.append("")
    lines.append("| target | N | permindex | reference | ratio or figure | goal |")
    lines.append("| --- | ---: | ---: | ---: | ---: | --- |")
    faiss_name = "faiss MultiHash(4, b=16)"
    for n in sizes:
        faiss = by.get((faiss_name, n), {})
        default = by.get(("permindex (4, 1)", n), {})
        best = max(
            (by[(d, n)] for d in designs if (d, n) in by),
            key=lambda r: r.get("batch_qps", 0),
            default={},
        )
        goal_batch = "≥ 10x"
        duel = by.get(("head to head", n))
        if duel:  # both in one process, alternating rounds: the ratio targets
            kinds = [
                ("batch", "batch lookups (Match lists)", "faiss_batch_qps", goal_batch),
                ("columns", "batch lookups, columns=True", "faiss_batch_qps", "≥ 18x"),
                (
                    "single",
                    "single lookups, one per call",
                    "faiss_single_qps",
                    "≥ 10x" if n <= 1_000_000 else "≥ 40x",
                ),
            ]
            for kind, what, theirs, goal in kinds:
                if f"{kind}_ratios" not in duel:
                    continue  # results from before this figure
                lines.append(
                    f"| {what}, (4, 1) vs faiss, one process{_rounds(duel[kind + '_ratios'])} "
                    f"| {_power(n)} | {_fmt(duel[f'permindex_{kind}_qps'])} "
                    f"| {_fmt(duel[theirs])} | {duel[kind + '_ratio']:.2f}x "
                    f"| {goal} |"
                )
            if "two_threads_ratios" in duel:
                lines.append(
                    f"| two threads, each query_many on half the batch, vs one thread on all"
                    f"{_rounds(duel['two_threads_ratios'])} | {_power(n)} "
                    f"| {_fmt(duel['permindex_two_threads_qps'])} "
                    f"| {_fmt(duel['permindex_batch_qps'])} | {duel['two_threads_ratio']:.2f}x "
                    f"| ≥ 1.6x |"
                )
            if "two_threads_columns_ratios" in duel:
                lines.append(
                    f"| two threads, each query_many(columns=True) on half the batch, vs one "
                    f"thread on all{_rounds(duel['two_threads_columns_ratios'])} | {_power(n)} "
                    f"| {_fmt(duel['permindex_two_threads_columns_qps'])} "
                    f"| {_fmt(duel['permindex_columns_qps'])} "
                    f"| {duel['two_threads_columns_ratio']:.2f}x | ≥ 1.6x |"
                )
            if "kernel_two_threads_ratios" in duel:
                lines.append(
                    f"| beside: the lookup kernel alone (no ordering, keys or Python objects), two "
                    f"threads on halves vs one thread on all: what the machine gives a second "
                    f"thread{_rounds(duel['kernel_two_threads_ratios'])} | {_power(n)} "
                    f"| {_fmt(duel['kernel_two_threads_qps'])} | {_fmt(duel['kernel_qps'])} "
                    f"| {duel['kernel_two_threads_ratio']:.2f}x | (reference) |"
                )
            if "two_threads_ratios" in duel:
                lines.append(
                    f"| first query_many after the build / the next | {_power(n)} "
                    f"| {_fmt(duel['first_batch_qps'])} | {_fmt(duel['second_batch_qps'])} "
                    f"| {_ratio(duel['first_batch_qps'], duel['second_batch_qps'])} "
                    f"| no cold first query |"
                )
        lines.append(
            f"| batch lookups, (4, 1) vs faiss, separate processes | {_power(n)} "
            f"| {_fmt(default.get('batch_qps'))} | {_fmt(faiss.get('batch_qps'))} "
            f"| {_ratio(default.get('batch_qps'), faiss.get('batch_qps'))} "
            f"| {goal_batch} |"
        )
        if best and best is not default:
            lines.append(
                f"| batch lookups, best design {best['system'][10:]} vs faiss | {_power(n)} "
                f"| {_fmt(best.get('batch_qps'))} | {_fmt(faiss.get('batch_qps'))} "
                f"| {_ratio(best.get('batch_qps'), faiss.get('batch_qps'))} | {goal_batch} |"
            )
        best_single = max(
            (by[(d, n)] for d in designs if (d, n) in by),
            key=lambda r: r.get("single_qps", 0),
            default={},
        )
        lines.append(
            f"| single lookups, {best_single.get('system', '')[10:]} vs faiss one per call, "
            "separate processes "
            f"| {_power(n)} | {_fmt(best_single.get('single_qps'))} "
            f"| {_fmt(faiss.get('single_qps'))} "
            f"| {_ratio(best_single.get('single_qps'), faiss.get('single_qps'))} | ≥ 2.5x |"
        )
        if default:
            lines.append(
                f"| (4, 1) bytes per fingerprint, keys excluded (keys beside) | {_power(n)} "
                f"| {_fmt(default.get('bytes_per_fp'), 1)} "
                f"| keys {_fmt(default.get('key_bytes_per_key'), 1)} B/key | | ≤ 48 |"
            )
            if "build_tables_first_s" in default:
                tables = (
                    f"tables, one thread: {_fmt(n / default['build_tables_s'])}/s (median of 3; "
                    f"first {_fmt(n / default['build_tables_first_s'])}/s); "
                    f"{_fmt(n / default['build_tables_threads_s'])}/s in the index's threads"
                )
            else:  # results from before the median of three
                tables = f"tables {_fmt(n / default['build_tables_s'])}/s"
            lines.append(
                f"| bulk load, string keys (tables alone) | {_power(n)} "
                f"| {_fmt(n / default['build_s'])}/s "
                f"| {tables} "
                f"| | ≥ 10^6/s (≥ 5x10^6/s) |"
            )
        if "add_many_per_s" in default:
            lines.append(
                f"| add_many in batches of 10,000; single add | {_power(n)} "
                f"| {_fmt(default['add_many_per_s'])}/s | {_fmt(default['add_per_s'])}/s | "
                f"| ≥ 500,000/s; ≥ 50,000/s |"
            )
            lines.append(
                f"| batch lookups while another thread ingests / idle | {_power(n)} "
                f"| {_fmt(default['batch_qps_while_ingesting'])} "
                f"| {_fmt(default['batch_qps_idle'])} "
                f"| {_ratio(default['batch_qps_while_ingesting'], default['batch_qps_idle'])} "
                f"(ingesting {_fmt(default['ingest_per_s_during_lookups'])}/s) | ≥ 0.5x |"
            )
        pybind = by.get(("simhash-pybind find_all", n), {})
        if "pairs_s" in default and pybind:
            four = pybind.get("pairs_4_blocks_s")
            best_peer = min(
                pybind.get("pairs_4_blocks_s", 1e9), pybind.get("pairs_6_blocks_s", 1e9)
            )
            reference, goal = (
                (four, "≥ 10x (4 blocks)") if n <= 1_000_000 else (best_peer, "≥ 3x (best)")
            )
            lines.append(
                f"| all pairs within 3 ({default['pairs']:,} pairs) vs simhash-pybind "
                f"| {_power(n)} | {_fmt(default['pairs_s'], 2)} s | {_fmt(reference, 2)} s "
                f"| {_ratio(reference, default['pairs_s'])} | {goal} |"
            )
        before = default.get("pairs_before")
        if before:
            lines.append(
                f"| all pairs within 3, this tree vs main when issue 13 was filed (c1b4e0d), "
                f"same run, processes of their own, alternating (medians of 6) | {_power(n)} "
                f"| {_fmt(before['now'], 2)} s | {_fmt(before['before'], 2)} s "
                f"| {_ratio(before['before'], before['now'])} | no regression |"
            )
    many = next((r for r in results if r["system"] == "simhash_many"), None)
    if many:
        rate = many["docs_per_s"]
        lines.append(
            f"| simhash_many on {many['docs']:,} texts of {many['words_per_text']} words "
            f"({many['texts']}) vs the per-shingle Python hashing floor (lower, split, join, "
            f"xxh3_64 each), same run; simhash one text per call beside "
            f"| | {_fmt(rate['simhash_many'])} docs/s | floor {_fmt(rate['floor'])} docs/s; "
            f"simhash {_fmt(rate['simhash'])} docs/s | {many['many_over_floor']:.2f}x | ≥ 8x |"
        )
        first = many.get("first_call")
        if first:
            lines.append(
                "| simhash_many's first call in a fresh process: compiling (empty cache), then "
                "loading from numba's cache (numba's import beside) | "
                f"| {first['compile']['first_call_s']:.2f} s "
                f"| {first['cached']['first_call_s']:.2f} s "
                f"(import numba {first['cached']['import_numba_s']:.2f} s) | | measured |"
            )
    dedup = next((r for r in results if r["system"] == "dedup"), None)
    if dedup:
        fast, slow = dedup["kernels"], dedup["reference"]
        shares = ", ".join(f"{name} {share:.0%}" for name, share in fast["stage_shares"].items())
        base = dedup.get("baseline")
        if base:
            ratios = dedup.get("baseline_ratios")
            figure = (
                f"{statistics.median(ratios):.2f}x"
                if ratios
                else _ratio(base["wall_seconds"], fast["wall_seconds"])
            )
            lines.append(
                f"| permindex dedup of {_power(dedup['n'])} synthetic documents, now vs main "
                f"when the issue was filed (commit {base['commit'][:7]}), same run, wall (peak "
                f"RSS){_rounds(ratios)} | {_power(dedup['n'])} "
                f"| {fast['wall_seconds']:.1f} s "
                f"({fast['peak_rss_mb']:.0f} MB) | {base['wall_seconds']:.1f} s "
                f"({base['peak_rss_mb']:.0f} MB) "
                f"| {figure} | ≥ 5x |"
            )
        lines.append(
            f"| permindex dedup of {_power(dedup['n'])} synthetic documents "
            f"({fast['corpus_mb']} MB gz, {fast['pairs']:,} pairs), kernels vs the reference "
            f"paths (PERMINDEX_JIT=0), wall (peak RSS); stages: {shares} "
            f"| {_power(dedup['n'])} | {fast['wall_seconds']:.1f} s ({fast['peak_rss_mb']:.0f} MB) "
            f"| {slow['wall_seconds']:.1f} s ({slow['peak_rss_mb']:.0f} MB) "
            f"| {_ratio(slow['wall_seconds'], fast['wall_seconds'])} "
            f"| {'(beside)' if base else '≥ 5x'} |"
        )
    restart = next((r for r in results if r["system"] == "restart"), None)
    if restart:
        lines.append(
            f"| restart: read snapshot, build index (~40-byte keys) | {_power(restart['n'])} "
            f"| {_fmt(restart['restart_ready_s'], 1)} s "
            f"| snapshot {restart['snapshot_bytes'] / 2**20:,.0f} MiB "
            f"| | ≤ 10 s |"
        )
    grpc = next((r for r in results if r["system"] == "gRPC"), None)
    if grpc:
        stream = grpc.get("stream_1")
        if stream:  # QueryColumns; the reference column is the unary Query of the same batches
            lines.append(
                f"| gRPC batch lookups, 1,000 per message on a QueryColumns stream, 1 client "
                f"(2 clients); reference: unary Query, 1,000 per message | {_power(grpc['n'])} "
                f"| {_fmt(stream['lookups_per_s'])}/s "
                f"({_fmt(grpc['stream_2']['lookups_per_s'])}/s) "
                f"| {_fmt(grpc['batch_1']['lookups_per_s'])}/s "
                f"({_fmt(grpc['batch_2']['lookups_per_s'])}/s) "
                f"| {_ratio(stream['lookups_per_s'], STREAM_GOAL)} of the goal "
                f"| ≥ {STREAM_GOAL:,}/s |"
            )
        else:  # results from before QueryColumns
            lines.append(
                f"| gRPC batch lookups, 1,000 per Query message, 1 client (2 clients) "
                f"| {_power(grpc['n'])} "
                f"| {_fmt(grpc['batch_1']['lookups_per_s'])}/s "
                f"({_fmt(grpc['batch_2']['lookups_per_s'])}/s) "
                f"| | | ≥ {STREAM_GOAL:,}/s (streamed) |"
            )
        for suffix in ("", "_large"):
            if f"stream_cpu{suffix}_kernels" not in grpc:
                continue
            # the index's factor on calls of the message's size (results from before it was
            # measured at the larger size give the one of 1,000 a call)
            index_cpu = grpc.get(f"index_cpu{suffix}") or grpc.get("index_cpu")
            goal = "the index's factor"
            if index_cpu:
                goal += (
                    f": {index_cpu['factor']:.2f}x here (query_many(columns=True) of "
                    f"{index_cpu['per_call']:,} random fingerprints a call in one process, "
                    f"{_fmt(index_cpu['kernels_cpu_s_per_million'], 2)} s vs "
                    f"{_fmt(index_cpu['reference_cpu_s_per_million'], 2)} s per 10^6)"
                )
            fast = grpc[f"stream_cpu{suffix}_kernels"]
            slow = grpc.get(f"stream_cpu{suffix}_reference")  # results from before issue 40
            per_message = fast.get("per_message", 1000)
            if slow is not None:
                less = _ratio(slow["server_cpu_s_per_million"], fast["server_cpu_s_per_million"])
                lines.append(
                    "| gRPC server CPU seconds per 10^6 QueryColumns lookups (1 client, "
                    f"{per_message:,} per message), compiled "
                    "kernels vs the reference paths (a second server with PERMINDEX_JIT=0, same "
                    f"data, alternating rounds) | {_power(grpc['n'])} "
                    f"| {_fmt(fast['server_cpu_s_per_million'], 2)} s "
                    f"({_fmt(fast['lookups_per_s'])}/s) "
                    f"| {_fmt(slow['server_cpu_s_per_million'], 2)} s "
                    f"({_fmt(slow['lookups_per_s'])}/s) "
                    f"| {less} less CPU | {goal} |"
                )
            before = grpc.get(f"stream_cpu{suffix}_before")
            index_before = grpc.get(f"index_cpu{suffix}_before")
            if before and index_before:  # against main when issue 13 was filed
                commit = str(grpc.get("before_commit", ""))[:7]
                factor = _ratio(
                    before["server_cpu_s_per_million"], fast["server_cpu_s_per_million"]
                )
                lines.append(
                    "| gRPC server CPU seconds per 10^6 QueryColumns lookups (1 client, "
                    f"{per_message:,} per message), this tree vs main when issue 13 was filed "
                    f"({commit}, a third server, same data, alternating rounds) "
                    f"| {_power(grpc['n'])} "
                    f"| {_fmt(fast['server_cpu_s_per_million'], 2)} s "
                    f"| {_fmt(before['server_cpu_s_per_million'], 2)} s "
                    f"({_fmt(before['lookups_per_s'])}/s) "
                    f"| {factor} less CPU | the index's factor against {commit}: "
                    f"{index_before['factor']:.2f}x (query_many(columns=True) now vs query_many "
                    f"then, {index_before['per_call']:,} random fingerprints a call, processes "
                    f"of their own, {_fmt(index_before['now_cpu_s_per_million'], 2)} s vs "
                    f"{_fmt(index_before['before_cpu_s_per_million'], 2)} s per 10^6) |"
                )
        server = f" (server: {grpc['server']})" if "server" in grpc else ""
        p50_rounds = _rounds(grpc["query_1"].get("p50_ratios"))
        calls_rounds = _rounds(grpc["query_4"].get("calls_ratios"))
        lines.append(
            f"| gRPC unary single lookup p50{server} vs the sync echo server{p50_rounds} "
            f"| {_power(grpc['n'])} "
            f"| {_fmt(grpc['query_1']['p50_ms'], 3)} ms | {_fmt(grpc['echo_1']['p50_ms'], 3)} ms "
            f"| {_median_ratio(grpc, 'query_1', 'p50_ms', 'echo_1')} | ≤ 1.2x |"
        )
        lines.append(
            f"| gRPC unary calls/s, 4 client processes{server}, vs the sync echo "
            f"server{calls_rounds} | {_power(grpc['n'])} "
            f"| {_fmt(grpc['query_4']['calls_per_s'])} | {_fmt(grpc['echo_4']['calls_per_s'])} "
            f"| {_median_ratio(grpc, 'query_4', 'calls_per_s', 'echo_4')} | ≥ 0.8x |"
        )
        if "aio_echo_1" in grpc:  # the asyncio echo server beside, same rounds
            lines.append(
                "| beside: asyncio (grpc.aio) echo server vs the sync echo server, p50 of one "
                f"client; calls/s of 4 | {_power(grpc['n'])} "
                f"| {_fmt(grpc['aio_echo_1']['p50_ms'], 3)} ms; "
                f"{_fmt(grpc['aio_echo_4']['calls_per_s'])}/s "
                f"| {_fmt(grpc['echo_1']['p50_ms'], 3)} ms; "
                f"{_fmt(grpc['echo_4']['calls_per_s'])}/s "
                f"| {_median_ratio(grpc, 'aio_echo_1', 'p50_ms', 'echo_1')}; "
                f"{_median_ratio(grpc, 'aio_echo_4', 'calls_per_s', 'echo_4')} | (reference) |"
            )
    if grpc and "machine" in grpc:  # measured apart: python benchmarks/run.py --only grpc
        gm = grpc["machine"]
        lines.append("")
        lines.append(
            f"The gRPC rows were measured apart (`python benchmarks/run.py --only grpc`) on "
            f"{gm['date']}, {grpc.get('server', '')} server, load average at the start "
            f"{gm['load_average_at_start']} on {gm['cores']} cores: other work on the machine "
            "moves these figures; the ratios come from alternating rounds of the same run."
        )
    if scale:
        lines.append("")
        size = f"{scale['n']:.0e}".replace("e+0", "e").replace("e+", "e")
        lines.append(
            f"10^8-class run (`python benchmarks/run.py --scale {size}`, "
            "permindex (4, 1) "
            f"only, keys `doc-00000001`): {scale['n']:,} fingerprints loaded in "
            f"{scale['load_s']:,.0f} s; tables {scale['bytes_per_fp']:.1f} B/fp, keys "
            f"{scale['key_bytes_per_key']:.1f} B/key; "
            f"process RSS {scale['rss_bytes'] / 2**30:.1f} GiB "
            f"(peak {scale['max_rss_bytes'] / 2**30:.1f} GiB); "
            f"batch {scale['batch_qps']:,.0f} q/s, "
            f"one per call {scale['single_qps']:,.0f} q/s; {scale['checked']} queries checked "
            f"against brute force, {scale['wrong']} wrong ({scale['machine']['date']})."
        )
    lines.append("")
    lines.append("![queries/s and bytes per fingerprint against N](assets/plot.png)")
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [
        r for r in payload["results"] if "n" in r and ("batch_qps" in r or "single_qps" in r)
    ]
    systems = sorted({r["system"] for r in results})
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in systems:
        rows = sorted((r for r in results if r["system"] == system), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        style = "-o" if system.startswith("permindex") else "--s"
        if any("batch_qps" in r for r in rows):
            left.plot(ns, [r.get("batch_qps", float("nan")) for r in rows], style, label=system)
        if any("bytes_per_fp" in r for r in rows):
            right.plot(ns, [r.get("bytes_per_fp", float("nan")) for r in rows], style, label=system)
    left.set(
        xscale="log",
        yscale="log",
        xlabel="N (fingerprints)",
        ylabel="queries/s, batch of 10,000",
        title="Batch lookups, k = 3, one thread",
    )
    right.set(
        xscale="log",
        xlabel="N (fingerprints)",
        ylabel="bytes per fingerprint (keys excluded)",
        title="Memory",
    )
    left.grid(True, which="both", alpha=0.3)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    left.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
