//! `context.pin`, `context.unpin`, `context.purge`: what a client keeps verbatim and what it
//! drops, by stable ids, logged so that both survive restarts.
//!
//! A pinned message or result still in the live tail is sent where it is, whole (its results
//! are never cut). Once a compaction takes it, its verbatim text is read back from the archive
//! and re-emitted in the pinned block right after the summary, after every compaction. A
//! purged result is a one-line stub in every later request; its offload file and the archive
//! keep it.

use satchel_core::pins::{message_text, message_title};
use satchel_core::render::result_id;
use satchel_protocol::{
    MAX_PIN_TEXT_CHARS, PINNED_WINDOW_SHARE_DIVISOR, PinParams, PinsResult, PurgeParams, PurgeResult, UnpinParams,
};
use satchel_storage::{PinRecord, PinTarget, SessionRecord};

use crate::call::CallToken;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::live::Ticket;
use crate::session::{Session, format_or_default};

/// Reads `r12` or `r12.1` as (message index, position among its offloaded texts).
fn parse_result_id(id: &str) -> Option<(usize, usize)> {
    let rest = id.strip_prefix('r')?;
    let (index, k) = match rest.split_once('.') {
        Some((index, k)) => (index, k.parse().ok().filter(|&k| k > 0)?),
        None => (rest, 0),
    };
    Some((index.parse().ok()?, k))
}

impl Engine {
    /// `context.pin`.
    pub fn pin(&self, ticket: Ticket, params: PinParams) -> Result<PinsResult, EngineError> {
        let target = match (params.message_index, params.text, params.result_id.as_deref()) {
            (Some(index), None, None) => PinTarget::Message { index },
            (None, Some(text), None) if !text.trim().is_empty() && text.chars().count() <= MAX_PIN_TEXT_CHARS => {
                PinTarget::Text { text }
            }
            (None, Some(text), None) if text.trim().is_empty() => {
                return Err(EngineError::invalid_params("text", "is empty"));
            }
            (None, Some(text), None) => {
                return Err(EngineError::invalid_params(
                    "text",
                    format!(
                        "has {} characters; a pinned text may have at most {MAX_PIN_TEXT_CHARS} (it is sent in every request: put documents in memory files)",
                        text.chars().count()
                    ),
                ));
            }
            (None, None, Some(id)) => {
                let (index, k) = parse_result_id(id).ok_or_else(|| {
                    EngineError::invalid_params("result_id", format!("{id} is not a result id (r12, r12.1)"))
                })?;
                PinTarget::Result { index, k }
            }
            _ => {
                return Err(EngineError::invalid_params(
                    "message_index",
                    "give exactly one of message_index, text and result_id",
                ));
            }
        };
        self.transaction(ticket, &CallToken::new(), |slot| {
            let id = &params.session_id;
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(id.clone()));
            };
            check_target(session, &target)?;
            self.check_pinned_size(session, &target)?;
            let record = PinRecord {
                id: session.pins().next_id(),
                label: params.label.clone(),
                target,
            };
            self.sessions.append(id, &[SessionRecord::Pin(record.clone())])?;
            let pin_id = record.id.clone();
            session.pin(record);
            self.resolve_pins(session)?;
            Ok(PinsResult {
                session_id: id.clone(),
                pin_id,
                pins: session.pins().infos(),
            })
        })
    }

    /// `context.unpin`.
    pub fn unpin(&self, ticket: Ticket, params: UnpinParams) -> Result<PinsResult, EngineError> {
        self.transaction(ticket, &CallToken::new(), |slot| {
            let id = &params.session_id;
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(id.clone()));
            };
            let pins = session.pins().in_force();
            if !pins.iter().any(|p| p.record.id == params.pin_id) {
                let known: Vec<&str> = pins.iter().map(|p| p.record.id.as_str()).collect();
                return Err(EngineError::invalid_params(
                    "pin_id",
                    format!(
                        "no pin {} in this session (it has: {})",
                        params.pin_id,
                        known.join(", ")
                    ),
                ));
            }
            self.sessions.append(
                id,
                &[SessionRecord::Unpin {
                    id: params.pin_id.clone(),
                }],
            )?;
            session.unpin(&params.pin_id);
            Ok(PinsResult {
                session_id: id.clone(),
                pin_id: params.pin_id.clone(),
                pins: session.pins().infos(),
            })
        })
    }

    /// `context.purge`.
    pub fn purge(&self, ticket: Ticket, params: PurgeParams) -> Result<PurgeResult, EngineError> {
        let (index, k) = parse_result_id(&params.result_id).ok_or_else(|| {
            EngineError::invalid_params(
                "result_id",
                format!("{} is not a result id (r12, r12.1)", params.result_id),
            )
        })?;
        self.transaction(ticket, &CallToken::new(), |slot| {
            let id = &params.session_id;
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(id.clone()));
            };
            let Some(text) = session
                .entries()
                .iter()
                .find(|e| e.index == index)
                .and_then(|e| e.offloaded.get(k))
                .cloned()
            else {
                return Err(EngineError::invalid_params(
                    "result_id",
                    format!(
                        "{} is not an offloaded result of a live message of this session (a compacted one is in no request)",
                        params.result_id
                    ),
                ));
            };
            let result_id = result_id(index, k);
            if let Some(pin) = session
                .pins()
                .in_force()
                .iter()
                .find(|p| pins_result(&p.record.target, index, k))
            {
                return Err(EngineError::invalid_params(
                    "result_id",
                    format!(
                        "{result_id} is pinned ({}): a pinned result is sent whole, so it cannot also be purged; `context.unpin` {} first",
                        pin.record.id, pin.record.id
                    ),
                ));
            }
            self.sessions
                .append(id, &[SessionRecord::Purge { result_id: result_id.clone() }])?;
            session.purge(result_id.clone());
            Ok(PurgeResult {
                session_id: id.clone(),
                result_id,
                file: text.file,
                total_bytes: text.stats.total_bytes,
            })
        })
    }

    /// Gives each pin whose message is no longer live its verbatim text, read back from the
    /// archive (its message left with a compaction), and a title.
    pub(crate) fn resolve_pins(&self, session: &mut Session) -> Result<(), EngineError> {
        let format = format_or_default(session.format());
        for position in 0..session.pins().in_force().len() {
            let pin = &session.pins().in_force()[position];
            let (index, k) = match &pin.record.target {
                PinTarget::Text { text } => {
                    if pin.text.is_none() {
                        let title = pin.record.label.clone().unwrap_or_else(|| "text".into());
                        let text = text.clone();
                        session.resolve_pin(position, title, text);
                    }
                    continue;
                }
                PinTarget::Message { index } => (*index, None),
                PinTarget::Result { index, k } => (*index, Some(*k)),
            };
            if pin.text.is_some() || session.entries().iter().any(|e| e.index == index) {
                continue;
            }
            let Some((text, message)) = self.archived_text(session, index, k, format)? else {
                continue;
            };
            let title = pin.record.label.clone().unwrap_or_else(|| match k {
                None => message_title(index, &message),
                Some(k) => format!("tool result {}", result_id(index, k)),
            });
            session.resolve_pin(position, title, text);
        }
        Ok(())
    }
}

/// Whether a pin of `target` keeps the `k`-th offloaded text of message `index` whole.
fn pins_result(target: &PinTarget, index: usize, k: usize) -> bool {
    match *target {
        PinTarget::Result { index: i, k: j } => i == index && j == k,
        PinTarget::Message { index: i } => i == index,
        PinTarget::Text { .. } => false,
    }
}

impl Engine {
    /// The verbatim text of compacted message `index` (or of its `k`-th offloaded text) read
    /// back from the archive, with the message; `None` when no compaction archived it.
    fn archived_text(
        &self,
        session: &Session,
        index: usize,
        k: Option<usize>,
        format: satchel_core::format::MessageFormat,
    ) -> Result<Option<(String, serde_json::Value)>, EngineError> {
        let Some(compaction) = session.compactions().iter().find(|c| c.begun.indices.contains(&index)) else {
            return Ok(None);
        };
        // Its lines may be in several runs of the archive (a compaction a crash interrupted),
        // and a range an older satchel recorded may span other sessions' lines: the line is
        // the one of this compaction with this index.
        let mut found = None;
        for range in compaction.ranges() {
            let lines = self.archive.read_range(&range.file, range.start_line, range.end_line)?;
            found = lines
                .into_iter()
                .find(|(_, l)| l.index == index && l.compaction_id == compaction.begun.id);
            if found.is_some() {
                break;
            }
        }
        let Some((_, line)) = found else {
            return Ok(None);
        };
        let text = match k {
            None => message_text(&line.message, format),
            Some(k) => line
                .offloads
                .get(k)
                .and_then(|o| line.message.pointer(&o.pointer))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned(),
        };
        Ok(Some((text, line.message)))
    }

    /// Refuses a pin that would make the session's pinned content take more than its share of
    /// the window: every later request would be over the limit, and no compaction can help.
    /// A compacted message or result is measured as the pinned block will show it, read back
    /// from the archive.
    fn check_pinned_size(&self, session: &Session, target: &PinTarget) -> Result<(), EngineError> {
        let (field, index, k) = match target {
            PinTarget::Text { .. } => ("text", 0, None),
            PinTarget::Message { index } => ("message_index", *index, None),
            PinTarget::Result { index, k } => ("result_id", *index, Some(*k)),
        };
        let bytes = match target {
            PinTarget::Text { text } => text.len(),
            _ if session.entries().iter().any(|e| e.index == index) => live_bytes(session, index, k),
            _ => {
                let format = format_or_default(session.format());
                self.archived_text(session, index, k, format)?
                    .map_or(0, |(text, _)| text.len())
            }
        };
        let pinned: usize = session
            .pins()
            .in_force()
            .iter()
            .map(|p| match &p.record.target {
                PinTarget::Text { text } => text.len(),
                PinTarget::Message { index } => p
                    .text
                    .as_ref()
                    .map_or_else(|| live_bytes(session, *index, None), String::len),
                PinTarget::Result { index, k } => p
                    .text
                    .as_ref()
                    .map_or_else(|| live_bytes(session, *index, Some(*k)), String::len),
            })
            .sum();
        let window = self.session_config(session).effective_window();
        let share = window / PINNED_WINDOW_SHARE_DIVISOR;
        let tokens = ((pinned + bytes) / 4) as u64;
        if tokens > share {
            return Err(EngineError::invalid_params(
                field,
                format!(
                    "pinning it would make the session's pinned content about {tokens} tokens, over a quarter of its {window}-token window ({share}): every request would be over the limit; pin less (a finding, a range of `context.read`) or unpin something"
                ),
            ));
        }
        Ok(())
    }
}

/// Bytes a live message (or its `k`-th offloaded text) sends when pinned whole.
fn live_bytes(session: &Session, index: usize, k: Option<usize>) -> usize {
    let Some(entry) = session.entries().iter().find(|e| e.index == index) else {
        return 0;
    };
    match k {
        Some(k) => entry.offloaded.get(k).map_or(0, |o| o.stats.total_bytes),
        None => entry.message.to_string().len() + entry.offloaded.iter().map(|o| o.stats.total_bytes).sum::<usize>(),
    }
}

/// Refuses a pin of a message or result the session never had, or of a purged result.
fn check_target(session: &Session, target: &PinTarget) -> Result<(), EngineError> {
    let known = session.history_len();
    // A pin sends whole what a purge sends as a stub: a purged result cannot be pinned, alone
    // or with its message.
    let purged = match *target {
        PinTarget::Result { index, k } => Some(result_id(index, k)).filter(|id| session.pins().is_purged(id)),
        PinTarget::Message { index } => session
            .pins()
            .purged()
            .find(|id| parse_result_id(id).is_some_and(|(i, _)| i == index))
            .cloned(),
        PinTarget::Text { .. } => None,
    };
    if let Some(id) = purged {
        let field = if matches!(target, PinTarget::Message { .. }) {
            "message_index"
        } else {
            "result_id"
        };
        return Err(EngineError::invalid_params(
            field,
            format!(
                "{id} was purged: later requests send its stub, and a purge is final (its file and the archive keep it; `context.read` it)"
            ),
        ));
    }
    match *target {
        PinTarget::Message { index } if index >= known => Err(EngineError::invalid_params(
            "message_index",
            format!("the session has {known} messages (0-{})", known.saturating_sub(1)),
        )),
        PinTarget::Result { index, k } => {
            let live = session.entries().iter().find(|e| e.index == index);
            let exists = match live {
                Some(entry) => k < entry.offloaded.len(),
                None => index < known && session.compactions().iter().any(|c| c.begun.indices.contains(&index)),
            };
            if exists {
                Ok(())
            } else {
                Err(EngineError::invalid_params(
                    "result_id",
                    format!("{} is not an offloaded result of this session", result_id(index, k)),
                ))
            }
        }
        _ => Ok(()),
    }
}
