//! `satchel inspect --memory`: the long-term memory index as a few lines of text.

use std::io::Write;

use serde_json::Value;

/// Writes the `memory.status` result `status` for a person.
pub fn write_status(out: &mut impl Write, status: &Value) -> anyhow::Result<()> {
    let index = &status["index"];
    let number = |v: &Value| v.as_u64().unwrap_or(0);
    let modes: Vec<&str> = status["modes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    writeln!(out, "memory index  {}", status["index_path"].as_str().unwrap_or("?"))?;
    writeln!(
        out,
        "  {} files, {} chunks, {} vectors ({} waiting), {:.1} KiB",
        number(&index["files"]),
        number(&index["chunks"]),
        number(&index["vectors"]),
        number(&index["chunks_without_vector"]),
        number(&index["index_bytes"]) as f64 / 1024.0
    )?;
    let last = index["last_indexed_ms"]
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(|| "never".to_owned(), |at| at.to_rfc3339());
    writeln!(out, "  last indexed {last}; search modes: {}", modes.join(" + "))?;
    for warning in index["open_warnings"].as_array().into_iter().flatten() {
        writeln!(out, "  warning: {}", warning.as_str().unwrap_or_default())?;
    }
    let watcher = &status["watcher"];
    writeln!(
        out,
        "watcher       {}: {} batches, {} paths{}",
        watcher["backend"].as_str().unwrap_or("?"),
        number(&watcher["batches"]),
        number(&watcher["paths_reported"]),
        watcher["last_error"]
            .as_str()
            .map(|e| format!(", last error: {e}"))
            .unwrap_or_default()
    )?;
    match status["embedding"].as_object() {
        Some(embedding) => {
            let cache = &embedding["cache"];
            writeln!(
                out,
                "embeddings    {} ({}): cache {} hits, {} misses, {} failures, {}/{} entries",
                embedding["backend"].as_str().unwrap_or("?"),
                embedding["model"].as_str().unwrap_or("?"),
                number(&cache["hits"]),
                number(&cache["misses"]),
                number(&cache["failures"]),
                number(&cache["entries"]),
                number(&cache["capacity"])
            )?;
            if let Some(error) = index["last_embedding_error"].as_str() {
                writeln!(out, "  last embedding error: {error}")?;
            }
        }
        None => writeln!(out, "embeddings    none (BM25 only)")?,
    }
    match status["next_merge"].as_str() {
        Some(at) => writeln!(out, "daily merge   next at {at}")?,
        None => writeln!(out, "daily merge   off")?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_status_reads_as_a_few_lines() {
        let status = json!({
            "index_path": "index/memory.sqlite",
            "modes": ["bm25", "vector"],
            "index": {"files": 3, "chunks": 41, "vectors": 40, "chunks_without_vector": 1, "index_bytes": 131072,
                      "last_indexed_ms": 1795552681225_i64, "open_warnings": ["the index was corrupt and is rebuilt"]},
            "watcher": {"backend": "notify+poll", "batches": 7, "paths_reported": 9, "last_error": null},
            "embedding": {"backend": "openai", "model": "openai:text-embedding-v4:1024",
                          "cache": {"hits": 5, "misses": 41, "failures": 1, "entries": 41, "capacity": 2000}},
            "next_merge": "2026-11-25T00:00:00+00:00"
        });
        let mut out = Vec::new();
        write_status(&mut out, &status).unwrap();
        insta::assert_snapshot!(String::from_utf8(out).unwrap(), @r"
        memory index  index/memory.sqlite
          3 files, 41 chunks, 40 vectors (1 waiting), 128.0 KiB
          last indexed 2026-11-24T20:38:01.225+00:00; search modes: bm25 + vector
          warning: the index was corrupt and is rebuilt
        watcher       notify+poll: 7 batches, 9 paths
        embeddings    openai (openai:text-embedding-v4:1024): cache 5 hits, 41 misses, 1 failures, 41/2000 entries
        daily merge   next at 2026-11-25T00:00:00+00:00
        ");
    }
}
