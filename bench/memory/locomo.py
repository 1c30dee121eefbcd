#!/usr/bin/env python3
"""Memory retrieval benchmark on the LoCoMo slice in ../shared/data/locomo (conv-26, conv-30).

For each conversation: a fresh workspace, a real `satchel serve` over stdio, every session's
memory file written with `memory.write` (into memory/locomo/<sample>/session_NN.md; the call
indexes it, so its time is the indexing time), then one `memory.search` per question. Hits
are mapped to dialog turns through their line ranges (each line of the files is one turn,
tagged `[D<session>:<turn>]`), and recall@k is the share of a question's evidence turns among
the first k retrieved turns (1.0 without evidence), as in the LoCoMo paper's Table 3; the mean
is over all questions, adversarial ones included.

Modes: bm25 (always), and vector and hybrid when --model DIR is given (a satchel built with
the `local-embeddings` feature, and an all-MiniLM-L6-v2 directory from
scripts/fetch-embedding-model).

The data is not in the repository (CC BY-NC); without it this prints why and exits 0.
Output: a Markdown table on stdout, and the numbers as JSON in --out.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TAG = re.compile(r"\[(D\d+:\d+)\]")
# Overall R@5 / R@10 the product must keep on this slice (the acceptance).
TARGETS = {"bm25": (57.0, 64.0), "hybrid": (60.0, 70.0)}
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


class Daemon:
    """A `satchel serve` on stdio, spoken to in NDJSON."""

    def __init__(self, binary, workspace, env):
        self.proc = subprocess.Popen(
            [binary, "--workspace", str(workspace), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.next_id = 0

    def call(self, method, params):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"satchel exited during {method}")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                break
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run_conversation(binary, sample, files, questions, modes, model):
    """Indexes one conversation and answers its questions in each mode."""
    results = {mode: [] for mode in modes}
    latencies = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="satchel-locomo-") as workspace:
        env = dict(os.environ)
        env["SATCHEL_MEMORY_MERGE_ENABLED"] = "false"
        # Each mode must pay for its own query embedding: the texts are the same in every mode.
        env["EMBEDDING_CACHE_ENABLED"] = "false"
        if model:
            env["SATCHEL_EMBEDDING_BACKEND"] = "local"
            env["SATCHEL_EMBEDDING_MODEL_PATH"] = str(model)
        daemon = Daemon(binary, workspace, env)
        try:
            daemon.call("initialize", {})
            lines_of = {}
            started = time.perf_counter()
            for path in files:
                rel = f"memory/locomo/{sample}/{path.name}"
                text = path.read_text()
                daemon.call("memory.write", {"path": rel, "content": text})
                lines_of[rel] = text.splitlines()
            indexing_s = time.perf_counter() - started
            edit_ms = edit_latency(daemon, Path(workspace), sample)
            for question in questions:
                for mode in modes:
                    started = time.perf_counter()
                    found = daemon.call(
                        "memory.search",
                        {"query": question["question"], "max_results": 10, "min_score": 0.0, "mode": mode},
                    )
                    latencies[mode].append((time.perf_counter() - started) * 1000)
                    turns = []
                    for hit in found["results"]:
                        lines = lines_of.get(hit["path"], [])
                        for line in lines[hit["start_line"] - 1 : hit["end_line"]]:
                            for tag in TAG.findall(line):
                                if tag not in turns:
                                    turns.append(tag)
                    results[mode].append((question, turns))
        finally:
            daemon.close()
    return results, latencies, indexing_s, edit_ms


def edit_latency(daemon, workspace, sample):
    """Milliseconds from a file written by hand (as an agent's file tool would) to the first
    `memory.search` that finds it: the watcher's debounce plus re-indexing."""
    token = f"zebrafinch{sample.replace('-', '')}"
    note = workspace / "memory" / "edited-by-hand.md"
    started = time.perf_counter()
    note.write_text(f"- The new staging host is called {token}.\n")
    while time.perf_counter() - started < 10:
        found = daemon.call("memory.search", {"query": token, "mode": "bm25", "min_score": 0.0})
        if found["results"]:
            return (time.perf_counter() - started) * 1000
        time.sleep(0.005)
    raise RuntimeError("a file written by hand was not searchable within 10 s")


def recall(evidence, turns, k):
    if not evidence:
        return 1.0
    top = set(turns[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/release/satchel")
    parser.add_argument("--data", default=os.environ.get("SHARED", "../shared") + "/data/locomo")
    parser.add_argument("--model", help="all-MiniLM-L6-v2 directory: adds the vector and hybrid modes")
    parser.add_argument("--out", default="target/bench/memory-locomo.json")
    parser.add_argument("--limit", type=int, help="at most this many questions per conversation (a smoke run)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when overall recall falls under the targets (BM25 57 / 64, hybrid 60 / 70)",
    )
    args = parser.parse_args()

    data = Path(args.data)
    if not (data / "qa.jsonl").exists():
        print(f"skipped: no LoCoMo slice at {data} (it lives in ../shared/data, not in the repository)")
        return 0
    modes = ["bm25"] + (["vector", "hybrid"] if args.model else [])
    questions = defaultdict(list)
    for line in (data / "qa.jsonl").read_text().splitlines():
        q = json.loads(line)
        questions[q["sample_id"]].append(q)

    per_mode = {mode: [] for mode in modes}
    latency = {mode: [] for mode in modes}
    indexing = {}
    for sample in sorted(questions):
        files = sorted((data / "memory" / sample).glob("*.md"))
        qs = questions[sample][: args.limit] if args.limit else questions[sample]
        results, latencies, indexing_s, edit_ms = run_conversation(args.binary, sample, files, qs, modes, args.model)
        indexing[sample] = {"files": len(files), "seconds": round(indexing_s, 3), "edit_searchable_ms": round(edit_ms)}
        for mode in modes:
            per_mode[mode].extend(results[mode])
            latency[mode].extend(latencies[mode])

    report = {"questions": sum(len(v) for v in per_mode.values()) // len(modes), "indexing": indexing, "modes": {}}
    print(f"LoCoMo slice ({', '.join(sorted(questions))}), {report['questions']} questions; recall in %\n")
    header = "| mode | category | n | R@5 | R@10 |"
    print(header)
    print("|---|---|---|---|---|")
    for mode in modes:
        by_category = defaultdict(list)
        for question, turns in per_mode[mode]:
            by_category[CATEGORIES.get(question["category"], str(question["category"]))].append(
                (recall(question["evidence"], turns, 5), recall(question["evidence"], turns, 10))
            )
        rows = {}
        everything = [pair for pairs in by_category.values() for pair in pairs]
        for name, pairs in sorted(by_category.items()) + [("overall", everything)]:
            r5 = 100 * statistics.mean(p[0] for p in pairs)
            r10 = 100 * statistics.mean(p[1] for p in pairs)
            rows[name] = {"n": len(pairs), "r5": round(r5, 1), "r10": round(r10, 1)}
            label = f"**{name}**" if name == "overall" else name
            print(f"| {mode} | {label} | {len(pairs)} | {r5:.1f} | {r10:.1f} |")
        report["modes"][mode] = {
            "recall": rows,
            "search_ms_p50": round(percentile(latency[mode], 0.5), 2),
            "search_ms_p95": round(percentile(latency[mode], 0.95), 2),
        }
    print("\n| mode | search p50 (ms, round trip) | p95 |")
    print("|---|---|---|")
    for mode in modes:
        m = report["modes"][mode]
        print(f"| {mode} | {m['search_ms_p50']} | {m['search_ms_p95']} |")
    print("\nindexing (memory.write of every session file, embeddings included): "
          + ", ".join(f"{s} {v['files']} files {v['seconds']} s" for s, v in indexing.items()))
    print("a file edited by hand, searchable after: "
          + ", ".join(f"{s} {v['edit_searchable_ms']} ms" for s, v in indexing.items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if args.check and not args.limit:
        failed = [
            f"{mode} R@5 {rows['overall']['r5']} / R@10 {rows['overall']['r10']} under {TARGETS[mode]}"
            for mode, result in report["modes"].items()
            for rows in [result["recall"]]
            if mode in TARGETS
            and (rows["overall"]["r5"] < TARGETS[mode][0] or rows["overall"]["r10"] < TARGETS[mode][1])
        ]
        for failure in failed:
            print(f"FAILED: {failure}", file=sys.stderr)
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
