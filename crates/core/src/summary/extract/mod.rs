//! Heuristics that read a coding agent's conversation: which tokens are paths, what a tool
//! call did, whether its result is a failure, which sentences are constraints, decisions or a
//! plan, and which user messages are demonstrations rather than requests.
//!
//! They are shared by both summarisers and meant for later readers of a conversation (request
//! focus, learning candidates): each is a pure function of text and small, so it can be tested
//! with a table of cases.
//!
//! Layout:
//! - [`text`]: whitespace, char-boundary cuts.
//! - [`paths`]: path-like tokens and what is junk among them.
//! - [`calls`]: what a tool call is (command key, files it changes, whether it only looks).
//! - [`outcome`]: whether a tool result is a failure, and its error line.
//! - [`prose`]: sentences, cue words, constraints, decisions, plans, demonstrations.
//! - [`findings`]: values found in a tool's output and used afterwards.

pub mod calls;
pub mod findings;
pub mod outcome;
pub mod paths;
pub mod prose;
pub mod text;
