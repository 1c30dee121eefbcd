//! `LocalEmbedder` on the real all-MiniLM-L6-v2, checked against sentence-transformers'
//! reference scores. Needs the model: `scripts/fetch-embedding-model` unpacks it into
//! `target/models/all-MiniLM-L6-v2` (or set `SATCHEL_EMBEDDING_MODEL` to another directory);
//! without it the tests say so and pass.
#![cfg(feature = "local-embeddings")]

use std::path::PathBuf;
use std::time::Instant;

use satchel_memory::embed::{Embedder, LocalEmbedder};

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SATCHEL_EMBEDDING_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/models/all-MiniLM-L6-v2"));
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: no embedding model in {}; run scripts/fetch-embedding-model",
            dir.display()
        );
        None
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    // Both are unit vectors.
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

#[test]
fn matches_the_reference_scores() {
    let Some(dir) = model_dir() else { return };
    let embedder = LocalEmbedder::load(&dir).unwrap();
    assert_eq!(embedder.model_id(), "local:all-MiniLM-L6-v2:384");
    assert_eq!(embedder.dimensions(), 384);

    let texts = strings(&[
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The new movie is awesome.",
        "This is an example sentence",
    ]);
    let vectors = embedder.embed(&texts).unwrap();
    assert_eq!(vectors.len(), 4);
    for vector in &vectors {
        assert_eq!(vector.len(), 384);
        assert!((cosine(vector, vector) - 1.0).abs() < 1e-4, "not unit length");
    }
    let similar = cosine(&vectors[0], &vectors[1]);
    let unrelated = cosine(&vectors[0], &vectors[2]);
    assert!(
        (similar - 0.7553).abs() < 0.01,
        "cos(food, bread) = {similar}, reference 0.7553"
    );
    assert!(
        (unrelated - -0.046).abs() < 0.05,
        "cos(food, movie) = {unrelated}, reference -0.046"
    );
    // sentence-transformers' first dimensions for this sentence.
    let reference = [0.067657, 0.063496, 0.048713, 0.079305, 0.037448];
    for (got, want) in vectors[3].iter().zip(reference) {
        assert!(
            (got - want).abs() < 1e-3,
            "first dims {:?}, reference {reference:?}",
            &vectors[3][..5]
        );
    }

    // Batching and padding change nothing: alone, or among longer texts, a text gets the same
    // vector.
    let alone = embedder.embed(&texts[..1]).unwrap();
    assert!(cosine(&alone[0], &vectors[0]) > 0.9999);
    assert!(embedder.embed(&[]).unwrap().is_empty());
}

/// Checkpoints saved from `BertForXxx` prefix every key with `bert.`; with no `model_type` in
/// config.json candle does not look for the prefix itself, so `LocalEmbedder` must.
#[test]
fn loads_weights_with_a_bert_prefix() {
    let Some(dir) = model_dir() else { return };
    let prefixed = tempfile::tempdir().unwrap();
    let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    let renamed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(name, tensor)| (format!("bert.{name}"), tensor))
        .collect();
    candle_core::safetensors::save(&renamed, prefixed.path().join("model.safetensors")).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("model_type");
    std::fs::write(prefixed.path().join("config.json"), config.to_string()).unwrap();
    std::fs::copy(dir.join("tokenizer.json"), prefixed.path().join("tokenizer.json")).unwrap();

    let text = strings(&["A man is eating food."]);
    let original = LocalEmbedder::load(&dir).unwrap().embed(&text).unwrap();
    let from_prefixed = LocalEmbedder::load(prefixed.path()).unwrap().embed(&text).unwrap();
    assert!(cosine(&original[0], &from_prefixed[0]) > 0.9999);
}

#[test]
fn a_missing_model_is_an_error_naming_the_file() {
    let empty = tempfile::tempdir().unwrap();
    let error = LocalEmbedder::load(empty.path()).err().unwrap();
    assert!(error.message.contains("config.json"), "{error}");
}

/// Speed on this machine: `cargo test --release --features local-embeddings --test embed_local
/// -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn throughput() {
    let Some(dir) = model_dir() else { return };
    let start = Instant::now();
    let embedder = LocalEmbedder::load(&dir).unwrap();
    eprintln!("load: {:.0} ms", start.elapsed().as_secs_f64() * 1e3);

    let query = strings(&["how do I rotate the daemon's log files"]);
    embedder.embed(&query).unwrap(); // warm-up
    let rounds = 20;
    let start = Instant::now();
    for _ in 0..rounds {
        embedder.embed(&query).unwrap();
    }
    eprintln!(
        "short query: {:.1} ms",
        start.elapsed().as_secs_f64() * 1e3 / f64::from(rounds)
    );

    // ~30-word chunks, all different.
    let chunks: Vec<String> = (0..128)
        .map(|i| {
            format!(
                "Note {i}: the watcher debounces file events for a short while, then re-reads the changed \
                 markdown file, splits it into chunks by heading and paragraph, and re-embeds only chunks \
                 whose hash changed since run {}.",
                i * 7
            )
        })
        .collect();
    let start = Instant::now();
    embedder.embed(&chunks).unwrap();
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{} chunks of ~30 words in batches of 32: {:.1} chunks/s",
        chunks.len(),
        chunks.len() as f64 / seconds
    );
}
