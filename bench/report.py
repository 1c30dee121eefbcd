#!/usr/bin/env python3
"""Turn the benchmark results in a directory into Markdown tables (stdout).

Usage: python3 bench/report.py target/bench > target/bench/report.md

Reads, from the directory:
  satchel.jsonl  one line per scenario result of `satchel-bench --json-lines` (required);
  peer.jsonl     optional, lines {"conversation": FILE, "peer": <bench_peer.py --json-lines output>};
  micro.txt      optional, the divan output of `cargo bench -p satchel-core`.

Python 3 standard library only, so it runs wherever the benchmark does.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

DASH = "–"


def load_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def canonical(path: str) -> str:
    """Satchel and peer results name the same file; compare them as real paths."""
    return os.path.realpath(path) if os.path.exists(path) else path


def fmt_ms(value) -> str:
    """Milliseconds with about three significant digits."""
    if value is None:
        return DASH
    if value < 1:
        return f"{value:.3f}"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def fmt_ratio(numerator, denominator) -> str:
    """peer ÷ satchel with two significant digits, so 0.04× and 0.4× stay apart."""
    if numerator is None or not denominator:
        return DASH
    ratio = numerator / denominator
    return f"{ratio:.0f}×" if ratio >= 10 else f"{ratio:.1f}×" if ratio >= 1 else f"{ratio:.2f}×"


def fmt(value) -> str:
    return DASH if value is None else str(value)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    model = DASH
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    uname = platform.uname()
    return f"{os.cpu_count()} CPUs ({model}), {uname.system} {uname.release}, {uname.machine}"


def file_system(path: str) -> str:
    """Type of the file system holding `path` (the longest mount point in /proc/mounts)."""
    best, kind = "", "?"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    real = os.path.realpath(path)
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def revision(repo: Path) -> str:
    """The commit benchmarked, noting uncommitted changes (read-only git commands)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"`{head}`" + (" with uncommitted changes" if dirty else "")


class Results:
    """satchel.jsonl grouped by conversation (in order of appearance) and tokenizer."""

    def __init__(self, lines: list[dict]):
        self.conversations: dict[str, dict] = {}  # source -> {"label", "conversation"}
        self.runs: dict[tuple[str, str], dict[str, dict]] = {}  # (source, tokenizer) -> scenario -> line
        for line in lines:
            source = line["conversation"]["source"]
            self.conversations.setdefault(source, {"label": line["label"], "conversation": line["conversation"]})
            self.runs.setdefault((source, line["tokenizer"]), {})[line["scenario"]] = line

    def rows(self):
        """(label, tokenizer, scenarios) in a stable order: conversations as run, estimate first."""
        for source, info in self.conversations.items():
            for tokenizer in ("estimate", "o200k_base"):
                scenarios = self.runs.get((source, tokenizer))
                if scenarios:
                    yield source, info["label"], tokenizer, scenarios
            for (s, tokenizer), scenarios in self.runs.items():
                if s == source and tokenizer not in ("estimate", "o200k_base"):
                    yield source, info["label"], tokenizer, scenarios


def get(scenarios: dict, scenario: str, field: str):
    return scenarios.get(scenario, {}).get(field)


def proxy_only(scenarios: dict) -> bool:
    """A run of the `proxy` scenario alone, which has its own table."""
    return set(scenarios) <= {"proxy"}


def conversations_table(results: Results) -> str:
    rows = []
    for source, info in results.conversations.items():
        c = info["conversation"]
        rows.append(
            [
                info["label"],
                f"`{Path(source).name}`" if not source.startswith("synthetic:") else f"`{source}`",
                fmt(c.get("format")),
                fmt(c.get("messages")),
                f"{c['bytes']:,}",
                f"{c['est_tokens_bytes_div4']:,}",
            ]
        )
    return table(["conversation", "source", "format", "messages", "bytes", "tokens (bytes/4)"], rows)


def first_pass_table(results: Results) -> str:
    rows = []
    for _source, label, tokenizer, s in results.rows():
        if proxy_only(s):
            continue
        actions = get(s, "first_pass", "actions") or {}
        rows.append(
            [
                label,
                tokenizer,
                fmt_ms(get(s, "startup", "median_ms")),
                fmt_ms(get(s, "first_pass", "median_ms")),
                fmt_ms(get(s, "first_pass", "warm_median_ms")),
                fmt(get(s, "first_pass", "tokens_total")),
                fmt(get(s, "first_pass", "messages_returned")),
                ", ".join(f"{k} {v}" for k, v in actions.items()) or DASH,
                "yes" if get(s, "first_pass", "over_limit") else "no",
            ]
        )
    return table(
        [
            "conversation",
            "tokenizer",
            "startup",
            "first pass (cold)",
            "first pass (warm)",
            "tokens out",
            "messages out",
            "actions",
            "over limit",
        ],
        rows,
    )


def step_table(results: Results) -> str:
    rows = []
    for _source, label, tokenizer, s in results.rows():
        if proxy_only(s):
            continue
        sa = s.get("steady_append", {})
        sf = s.get("steady_full", {})
        ra = s.get("replay_append", {})
        rows.append(
            [
                label,
                tokenizer,
                f"{fmt_ms(sa.get('p50_ms'))} / {fmt_ms(sa.get('p95_ms'))} / {fmt_ms(sa.get('max_ms'))}",
                fmt_ms(sf.get("prepare_p50_ms")),
                f"{fmt_ms(sf.get('floor_p50_ms'))} ({fmt_ms(sf.get('floor_parse_p50_ms'))} + "
                f"{fmt_ms(sf.get('floor_serialise_p50_ms'))})",
                DASH if sf.get("ratio_median") is None else f"{sf['ratio_median']:.1f}×",
                f"{fmt_ms(ra.get('p50_ms'))} / {fmt_ms(ra.get('p95_ms'))} / {fmt_ms(ra.get('max_ms'))}",
                fmt(ra.get("count")),
                fmt_ms(ra.get("total_ms")),
            ]
        )
    return table(
        [
            "conversation",
            "tokenizer",
            "steady append p50 / p95 / max",
            "steady full p50",
            "serde floor p50 (parse + write)",
            "full ÷ floor (median)",
            "replay append p50 / p95 / max",
            "replay calls",
            "replay total",
        ],
        rows,
    )


def sections_table(results: Results) -> str | None:
    """`steady_sections`: plain vs sections p50 per conversation; None when no run has it."""
    rows = []
    for _source, label, tokenizer, s in results.rows():
        ss = s.get("steady_sections")
        if not ss:
            continue
        added, ratio = ss.get("added_p50_ms"), ss.get("added_p50_ratio")
        truncated = ss.get("truncated_sections")
        rows.append(
            [
                label,
                tokenizer,
                fmt(ss.get("count")),
                f"{fmt_ms(ss.get('plain_p50_ms'))} / {fmt_ms(ss.get('plain_p90_ms'))}",
                f"{fmt_ms(ss.get('sections_p50_ms'))} / {fmt_ms(ss.get('sections_p90_ms'))}",
                DASH if added is None else f"{added:+.3f}" + ("" if ratio is None else f" ({ratio:+.0%})"),
                fmt_ms(ss.get("wire_floor_added_ms")),
                DASH if ss.get("assembly_added_p50_ms") is None else f"{ss['assembly_added_p50_ms']:+.3f}",
                DASH if ss.get("sections_chars") is None else f"{ss['sections_chars']:,}",
                DASH if ss.get("system_chars") is None else f"{ss['system_chars']:,}",
                "no prompt returned" if truncated is None else str(truncated),
            ]
        )
    if not rows:
        return None
    return table(
        [
            "conversation",
            "tokenizer",
            "steps",
            "plain p50 / p90",
            "sections p50 / p90",
            "added p50 (vs plain)",
            "wire floor of the extra bytes",
            "added above the floor",
            "section chars sent",
            "system chars returned",
            "sections truncated",
        ],
        rows,
    )


def cache_table(results: Results) -> str | None:
    """`cache_prefix`: prefix reuse before (batch 1) and after (the default); None when no run has it."""
    rows = []
    sums = {"before": [], "after": []}
    for _source, label, tokenizer, s in results.rows():
        cp = s.get("cache_prefix")
        if not cp:
            continue
        for side in sums:
            sums[side].append((cp.get(f"{side}_mean_share"), cp.get(f"{side}_distinct_prefixes")))

        def pair(key: str, percent: bool = False) -> str:
            b, a = cp.get(f"before_{key}"), cp.get(f"after_{key}")
            show = (lambda v: DASH if v is None else f"{v:.1%}") if percent else fmt
            return f"{show(b)} → {show(a)}"

        rows.append(
            [
                label,
                tokenizer,
                fmt(cp.get("max_input_length")),
                fmt(cp.get("before_calls")),
                pair("mean_share", True),
                pair("weighted_share", True),
                pair("distinct_prefixes"),
                pair("compactions"),
                pair("mean_tokens"),
                pair("over_limit_calls"),
            ]
        )
    if not rows:
        return None
    means = []
    for side in ("before", "after"):
        shares = [v for v, _ in sums[side] if v is not None]
        distinct = [d for _, d in sums[side] if d is not None]
        means.append(
            (sum(shares) / len(shares) if shares else None, sum(distinct) / len(distinct) if distinct else None)
        )
    (bs, bd), (as_, ad) = means
    rows.append(
        [
            "**mean**",
            "",
            "",
            "",
            f"{DASH if bs is None else f'{bs:.1%}'} → {DASH if as_ is None else f'{as_:.1%}'}",
            "",
            f"{DASH if bd is None else f'{bd:.1f}'} → {DASH if ad is None else f'{ad:.1f}'}",
            "",
            "",
            "",
        ]
    )
    return table(
        [
            "conversation",
            "tokenizer",
            "window",
            "calls",
            "mean prefix share",
            "token-weighted share",
            "distinct prefixes",
            "compactions",
            "mean request tokens",
            "over-limit calls",
        ],
        rows,
    )


def proxy_table(results: Results) -> str | None:
    """`proxy`: what `satchel proxy` adds, against its targets; None when no run has it."""
    rows = []
    for _source, label, tokenizer, s in results.rows():
        px = s.get("proxy")
        if not px:
            continue

        def p50_p95(name: str) -> str:
            return f"{fmt_ms(px.get(f'{name}_p50_ms'))} / {fmt_ms(px.get(f'{name}_p95_ms'))}"

        def against(name: str, target_key: str, within_key: str) -> str:
            value, target = px.get(f"{name}_p50_ms"), px.get(target_key)
            if value is None:
                return DASH
            verdict = "met" if px.get(within_key) else "**missed**"
            return f"{value:+.3f} (≤ {target} ms: {verdict})"

        rows.append(
            [
                label,
                tokenizer,
                fmt(px.get("count")),
                DASH if px.get("request_bytes_last") is None else f"{px['request_bytes_last']:,}",
                p50_p95("direct"),
                p50_p95("prepare"),
                p50_p95("proxy"),
                against("added", "target_added_p50_ms", "added_within_target"),
                fmt_ms(px.get("added_p95_ms")),
                f"{p50_p95('ttfb_direct')} → {p50_p95('ttfb_proxy')}",
                against("first_byte_added", "target_first_byte_added_p50_ms", "first_byte_within_target"),
            ]
        )
    if not rows:
        return None
    return table(
        [
            "conversation",
            "tokenizer",
            "steps",
            "request bytes (last)",
            "direct p50 / p95",
            "context.prepare p50 / p95",
            "through the proxy p50 / p95",
            "added p50 (proxy − direct − prepare)",
            "added p95",
            "stream TTFB p50 / p95, direct → proxy",
            "stream first byte added p50",
        ],
        rows,
    )


def memory_table(results: Results) -> str:
    rows = []
    for _source, label, tokenizer, s in results.rows():
        if proxy_only(s):
            continue
        sr = s.get("sessions_rss", {})
        sessions = sr.get("sessions")
        rows.append(
            [
                label,
                tokenizer,
                fmt(get(s, "first_pass", "peak_rss_mib")),
                fmt(get(s, "replay_append", "peak_rss_mib")),
                fmt(sr.get("idle_rss_mib")),
                DASH if sessions is None else f"{sr.get('rss_mib')} / {sr.get('peak_rss_mib')} ({sessions} sessions)",
                fmt_ms(sr.get("load_median_ms")),
            ]
        )
    return table(
        [
            "conversation",
            "tokenizer",
            "first pass peak RSS",
            "replay peak RSS",
            "idle RSS",
            "sessions RSS / peak",
            "session load p50 (ms)",
        ],
        rows,
    )


def peer_tables(results: Results, peers: list[dict]) -> str | None:
    """Peers vs satchel on the same files; None when no peer result matches a satchel one."""
    by_file = {canonical(p["conversation"]): p["peer"] for p in peers}
    first, steady = [], []
    for source, label, tokenizer, s in results.rows():
        peer = by_file.get(canonical(source))
        if peer is None:
            continue
        reme = peer.get("peers", {}).get("reme", {}).get("timings_ms_median", {})
        qwen = peer.get("peers", {}).get("qwenpaw", {}).get("timings_ms_median", {})
        reme_hook, qwen_hook = reme.get("pre_reasoning_hook_equiv"), qwen.get("post_acting_plus_pre_reasoning_equiv")
        cold, warm = get(s, "first_pass", "median_ms"), get(s, "first_pass", "warm_median_ms")
        first.append(
            [
                label,
                tokenizer,
                fmt_ms(cold),
                fmt_ms(warm),
                fmt_ms(reme_hook),
                f"{fmt_ratio(reme_hook, cold)} / {fmt_ratio(reme_hook, warm)}",
                fmt_ms(qwen_hook),
                f"{fmt_ratio(qwen_hook, cold)} / {fmt_ratio(qwen_hook, warm)}",
            ]
        )
        step = get(s, "steady_append", "p50_ms")
        reme_step, qwen_step = reme.get("steady_state_step"), qwen.get("steady_state_step")
        steady.append(
            [
                label,
                tokenizer,
                fmt_ms(step),
                fmt_ms(reme_step),
                fmt_ratio(reme_step, step),
                fmt_ms(qwen_step),
                fmt_ratio(qwen_step, step),
                fmt(peer.get("peak_rss_mb")),
            ]
        )
    if not first:
        return None
    return "\n\n".join(
        [
            "### First pass: the whole conversation at once",
            "ReMe `pre_reasoning_hook_equiv` and QwenPaw `post_acting_plus_pre_reasoning_equiv` (medians) vs "
            "satchel's `first_pass` median; ratio = peer ÷ satchel, so above 1× satchel is faster.",
            table(
                [
                    "conversation",
                    "satchel tokenizer",
                    "satchel cold",
                    "satchel warm",
                    "ReMe",
                    "ReMe ÷ cold / warm",
                    "QwenPaw",
                    "QwenPaw ÷ cold / warm",
                ],
                first,
            ),
            "### One step below the threshold",
            "Peer `steady_state_step` (median) vs satchel `steady_append` p50.",
            table(
                [
                    "conversation",
                    "satchel tokenizer",
                    "satchel p50",
                    "ReMe",
                    "ReMe ÷ satchel",
                    "QwenPaw",
                    "QwenPaw ÷ satchel",
                    "peer process peak RSS (MiB)",
                ],
                steady,
            ),
        ]
    )


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: report.py RESULTS_DIR")
    directory = Path(sys.argv[1])
    lines = load_jsonl(directory / "satchel.jsonl")
    if not lines:
        sys.exit(f"report.py: no results in {directory / 'satchel.jsonl'}")
    results = Results(lines)
    peers = load_jsonl(directory / "peer.jsonl")
    repo = Path(__file__).resolve().parent.parent
    workspace_roots = sorted({line.get("workspace_root") or "?" for line in lines})

    out = [
        "# satchel benchmarks",
        "",
        f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- machine: {machine()}",
        f"- satchel: {revision(repo)}",
        "- daemon workspaces in: "
        + ", ".join(f"`{root}` ({file_system(root)})" for root in workspace_roots)
        + ". The daemon fsyncs what it stores (offloaded results, the session log), so on a disk the "
        "file system's fsync latency is part of every call that stores something; "
        "`TMPDIR=/dev/shm scripts/bench` shows the cost without it.",
        "- times in ms; memory in MiB. satchel numbers are whole-process: a real `satchel serve` spawned "
        "by `bench/driver`, one JSON-RPC round trip over stdio per call (request written, reply read), "
        "including the daemon's JSON, token counting and durable disk writes.",
        "",
        "## Conversations",
        "",
        "`tokens (bytes/4)` counts the whole JSON. The peers' `syn-N` exports are sized by `bench_peer.py` "
        "after old tool results are cut to 3,000 bytes (its default `--size-basis context`), so they are "
        "several times N raw; satchel-bench's own `synthetic-N` counts raw bytes.",
        "",
        conversations_table(results),
        "",
        "## Start-up and first pass",
        "",
        "`startup`: spawn to the `initialize` reply. `first pass`: one `context.prepare` with the whole "
        "conversation in a fresh daemon; *cold* is its first call (one-off set-up such as building the "
        "tokenizer included), *warm* follows a one-message warm-up call in another session.",
        "",
        first_pass_table(results),
        "",
        "## Per-step latency",
        "",
        "`steady append`: the last `--steps` messages appended one per call. `steady full`: the same steps, "
        "each resending the whole history with `messages`; the serde floor is `serde_json` parsing that "
        "request into a `Value` and writing it back, in the driver (best of 3). `replay append`: the whole "
        "conversation from its first message, one message per call.",
        "",
        step_table(results),
    ]
    sections = sections_table(results)
    if sections:
        out += [
            "",
            "## System-prompt assembly (40 sections)",
            "",
            "`steady_sections`: one daemon, two sessions with the same conversation; each step appends the "
            "next message (the last `--steps`) to `plain` and to `sections`, which also resends the same 40 "
            "sections every call (~4 KB each, 4 protected, varied priorities and source types: ~160,000 "
            "characters, over the default 131,072-character prompt budget, so truncation runs every call). "
            "The two calls of a step run back to back in alternating order. `added p50` = sections p50 "
            "− plain p50: what assembling, counting and returning the system prompt costs per step, the "
            "~160 KB of sections on the wire included.",
            "",
            sections,
        ]
    cache = cache_table(results)
    if cache:
        out += [
            "",
            "## Prompt-cache reuse (`cache_prefix`)",
            "",
            "Each conversation replayed one message per call, twice: `before` with `pruning_phase_batch` 1 "
            "(the recent window moves with every message), `after` with the daemon's default. `mean prefix "
            "share`: the mean over calls (from the second) of `cache_stable_prefix_tokens / tokens.total`, the "
            "part of each request identical to the previous request's start. `distinct prefixes`: 1 + the "
            "calls whose messages do not extend the previous request's byte for byte (a compaction is one).",
            "",
            cache,
        ]
    proxy = proxy_table(results)
    if proxy:
        out += [
            "",
            "## The proxy's added latency (`proxy`)",
            "",
            "The `steady_full` steps (the whole history resent), each sent three ways: straight to a scripted "
            "model server on loopback inside the driver (`direct`), as `context.prepare` with the full list to "
            "a `satchel serve` over stdio (`prepare`), and through `satchel proxy` to the same server, each "
            "daemon in its own workspace with the same configuration. `added` = proxy − direct − prepare per "
            "step (negative: the proxy costs less than a stdio client's JSON-RPC round trip). Then the same "
            "request as a stream, whose headers and first event the server sends at once: `TTFB` is from the "
            "request to the first body byte (through the proxy it includes preparing the request); "
            "`first byte added` is, from the server handing its first event to the connection to the client "
            "reading it, proxy minus direct. Targets (issue 29): added p50 ≤ 3 ms on a 130K-token request, "
            "first byte added p50 ≤ 1 ms.",
            "",
            proxy,
        ]
    out += [
        "",
        "## Memory (daemon RSS, MiB)",
        "",
        "Peak RSS is `VmHWM` of the daemon after the scenario; `sessions` loads the conversation into "
        "that many sessions of one daemon.",
        "",
        memory_table(results),
    ]
    peer_section = peer_tables(results, peers)
    if peer_section:
        versions = next((p["peer"].get("versions") for p in peers if p["peer"].get("versions")), {}) or {}
        out += [
            "",
            "## Peers on the same conversations",
            "",
            "From `shared/peers/reme/bench_peer.py` ("
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + "): in-process Python calls with the summariser LLM stubbed, token counts estimated from bytes; "
            "no IPC and no JSON round trip, unlike satchel's figures.",
            "",
            peer_section,
        ]
    elif peers:
        out += ["", "## Peers", "", "peer.jsonl has results, but none for a conversation satchel ran."]
    micro = directory / "micro.txt"
    if micro.exists():
        out += ["", "## Micro benchmarks (satchel-core, divan)", "", "```", micro.read_text().rstrip(), "```"]
    print("\n".join(out))


if __name__ == "__main__":
    main()
