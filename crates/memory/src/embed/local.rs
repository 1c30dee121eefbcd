//! [`LocalEmbedder`]: a BERT-family sentence-transformers model (all-MiniLM-L6-v2) run on the
//! CPU with candle, from a directory holding `config.json`, `tokenizer.json` and
//! `model.safetensors` (`scripts/fetch-embedding-model` unpacks one). Nothing is downloaded.
//!
//! The forward pass is sentence-transformers' `Transformer → Pooling(mean) → Normalize`: BERT's
//! last hidden states, averaged over the real tokens (the attention mask), then L2-normalised.
//! Checked against the reference scores in `tests/embed_local.rs`.

use std::fs;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::{EmbedError, Embedder, l2_normalize};

/// Texts per forward pass. Larger batches stop paying off on a few cores and cost memory
/// (activations grow with batch × longest sequence²).
const BATCH_SIZE: usize = 32;

/// Tokens per text when the model directory does not say (`sentence_bert_config.json`'s
/// `max_seq_length`; 256 for all-MiniLM-L6-v2, which was trained on that length).
const DEFAULT_MAX_SEQ_LENGTH: usize = 256;

/// An [`Embedder`] running a local BERT sentence model.
pub struct LocalEmbedder {
    model: BertModel,
    /// Truncates to the model's sequence length and pads each batch to its longest text.
    tokenizer: Tokenizer,
    /// `local:{directory name}:{hidden size}`.
    model_id: String,
    hidden_size: usize,
}

impl LocalEmbedder {
    /// Loads the model in `model_dir` (f32, CPU). Takes a few hundred milliseconds and about
    /// twice the weights' size in memory while loading.
    pub fn load(model_dir: &Path) -> Result<Self, EmbedError> {
        let fail = |file: &str, error: &dyn std::fmt::Display| {
            EmbedError::new(format!("embedding model {}: {error}", model_dir.join(file).display()))
        };
        let read = |file: &str| fs::read(model_dir.join(file)).map_err(|e| fail(file, &e));
        let config: Config = serde_json::from_slice(&read("config.json")?).map_err(|e| fail("config.json", &e))?;
        let max_length = max_seq_length(model_dir).min(config.max_position_embeddings);

        let mut tokenizer =
            Tokenizer::from_file(model_dir.join("tokenizer.json")).map_err(|e| fail("tokenizer.json", &e))?;
        // all-MiniLM-L6-v2's tokenizer.json pads every text to a fixed 128 tokens and truncates
        // at 128: pad each batch only to its longest text instead (most queries are ~10 tokens),
        // and truncate at the model's real limit.
        let padding = PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..tokenizer.get_padding().cloned().unwrap_or_default()
        };
        tokenizer
            .with_padding(Some(padding))
            .with_truncation(Some(TruncationParams {
                max_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| fail("tokenizer.json", &e))?;

        // Read into memory rather than mmap: candle's mmap constructor is `unsafe` (the file
        // could change underneath), and the weights are copied into tensors anyway.
        let weights = read("model.safetensors")?;
        let model = load_bert(&weights, &config).map_err(|e| fail("model.safetensors", &e))?;

        let name = model_dir.file_name().unwrap_or(model_dir.as_os_str()).to_string_lossy();
        Ok(Self {
            model,
            tokenizer,
            model_id: format!("local:{name}:{}", config.hidden_size),
            hidden_size: config.hidden_size,
        })
    }

    /// Length of the vectors (384 for all-MiniLM-L6-v2).
    pub fn dimensions(&self) -> usize {
        self.hidden_size
    }

    /// One forward pass over at most [`BATCH_SIZE`] texts.
    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::new(format!("tokenizing for {}: {e}", self.model_id)))?;
        // Padding made every encoding as long as the longest.
        let length = encodings.first().map_or(0, |e| e.len());
        let ids: Vec<u32> = encodings.iter().flat_map(|e| e.get_ids().iter().copied()).collect();
        let mask: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_attention_mask().iter().copied())
            .collect();
        self.forward(ids, mask, (texts.len(), length))
            .map_err(|e| EmbedError::new(format!("running {}: {e}", self.model_id)))
    }

    fn forward(&self, ids: Vec<u32>, mask: Vec<u32>, shape: (usize, usize)) -> candle_core::Result<Vec<Vec<f32>>> {
        let device = &self.model.device;
        let ids = Tensor::from_vec(ids, shape, device)?;
        let mask = Tensor::from_vec(mask, shape, device)?;
        // Single-sentence inputs: every token is segment 0.
        let token_types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &token_types, Some(&mask))?; // (batch, tokens, hidden)
        // Mean over real tokens only: padding's hidden states are not zero, and averaging them
        // in pulls every sentence towards the same point (all pairs then score ≈0.8–0.9).
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (batch, tokens, 1)
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?; // (batch, hidden)
        let counts = mask.sum(1)?; // (batch, 1); ≥ 2, [CLS] and [SEP] are always there
        let mut vectors = summed.broadcast_div(&counts)?.to_vec2::<f32>()?;
        vectors.iter_mut().for_each(|v| l2_normalize(v));
        Ok(vectors)
    }
}

impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Batch texts of similar length together, so little of each batch is padding; a
        // length in bytes is a close enough stand-in for the token count.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH_SIZE) {
            let batch_texts: Vec<&str> = batch.iter().map(|&i| texts[i].as_str()).collect();
            for (&i, vector) in batch.iter().zip(self.embed_batch(&batch_texts)?) {
                vectors[i] = vector;
            }
        }
        Ok(vectors)
    }
}

/// BERT's weights, whether their keys carry a `bert.` prefix (checkpoints saved from
/// `BertForXxx`) or not (sentence-transformers' plain `BertModel`).
fn load_bert(weights: &[u8], config: &Config) -> candle_core::Result<BertModel> {
    let vb = VarBuilder::from_slice_safetensors(weights, DType::F32, &Device::Cpu)?;
    // candle finds the prefix itself only when config.json names the `model_type`.
    BertModel::load(vb.clone(), config).or_else(|plain| BertModel::load(vb.pp("bert"), config).map_err(|_| plain))
}

/// `max_seq_length` from `sentence_bert_config.json`, or the default when absent.
fn max_seq_length(model_dir: &Path) -> usize {
    fs::read(model_dir.join("sentence_bert_config.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|config| config.get("max_seq_length")?.as_u64())
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(DEFAULT_MAX_SEQ_LENGTH)
}
