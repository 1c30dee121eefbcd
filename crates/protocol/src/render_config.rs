//! The part of the [`Config`] that rendering a message reads, as one value the daemon can
//! hash.
//!
//! The daemon caches each message's rendering and drops the cache when this value's hash
//! changes. Rendering takes a [`RenderConfig`], not the whole [`Config`], so it cannot read a
//! key the hash leaves out; and the hash destructures every field, so a field added here
//! without being hashed does not compile. A hand-typed key once left out
//! `markdown_file_extensions`: a warm daemon sent a cached excerpt where a restarted one sent
//! the whole result.

use std::hash::{Hash, Hasher};

use crate::config::{Config, OffloadNoticePath};

/// The configuration keys rendering reads (see [`Config`] for each one's meaning).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderConfig<'a> {
    /// [`Config::pruning_enabled`].
    pub pruning_enabled: bool,
    /// [`Config::pruning_recent_msg_max_bytes`].
    pub pruning_recent_msg_max_bytes: usize,
    /// [`Config::pruning_old_msg_max_bytes`].
    pub pruning_old_msg_max_bytes: usize,
    /// [`Config::markdown_recent_msg_max_bytes`].
    pub markdown_recent_msg_max_bytes: usize,
    /// [`Config::markdown_old_msg_max_bytes`].
    pub markdown_old_msg_max_bytes: usize,
    /// [`Config::pruning_slack_bytes`].
    pub pruning_slack_bytes: usize,
    /// [`Config::pruning_tail_ratio`].
    pub pruning_tail_ratio: f64,
    /// [`Config::markdown_tool_names`].
    pub markdown_tool_names: &'a [String],
    /// [`Config::markdown_file_extensions`].
    pub markdown_file_extensions: &'a [String],
    /// [`Config::read_file_tool_names`].
    pub read_file_tool_names: &'a [String],
    /// [`Config::offload_notice_path`].
    pub offload_notice_path: OffloadNoticePath,
}

impl Hash for RenderConfig<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // No `..`: a new field must be hashed here, or this does not compile.
        let RenderConfig {
            pruning_enabled,
            pruning_recent_msg_max_bytes,
            pruning_old_msg_max_bytes,
            markdown_recent_msg_max_bytes,
            markdown_old_msg_max_bytes,
            pruning_slack_bytes,
            pruning_tail_ratio,
            markdown_tool_names,
            markdown_file_extensions,
            read_file_tool_names,
            offload_notice_path,
        } = self;
        pruning_enabled.hash(state);
        pruning_recent_msg_max_bytes.hash(state);
        pruning_old_msg_max_bytes.hash(state);
        markdown_recent_msg_max_bytes.hash(state);
        markdown_old_msg_max_bytes.hash(state);
        pruning_slack_bytes.hash(state);
        pruning_tail_ratio.to_bits().hash(state);
        markdown_tool_names.hash(state);
        markdown_file_extensions.hash(state);
        read_file_tool_names.hash(state);
        offload_notice_path.hash(state);
    }
}

impl Config {
    /// The keys rendering reads.
    pub fn render_config(&self) -> RenderConfig<'_> {
        RenderConfig {
            pruning_enabled: self.pruning_enabled,
            pruning_recent_msg_max_bytes: self.pruning_recent_msg_max_bytes,
            pruning_old_msg_max_bytes: self.pruning_old_msg_max_bytes,
            markdown_recent_msg_max_bytes: self.markdown_recent_msg_max_bytes,
            markdown_old_msg_max_bytes: self.markdown_old_msg_max_bytes,
            pruning_slack_bytes: self.pruning_slack_bytes,
            pruning_tail_ratio: self.pruning_tail_ratio,
            markdown_tool_names: &self.markdown_tool_names,
            markdown_file_extensions: &self.markdown_file_extensions,
            read_file_tool_names: &self.read_file_tool_names,
            offload_notice_path: self.offload_notice_path,
        }
    }
}
