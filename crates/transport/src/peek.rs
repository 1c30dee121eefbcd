//! What a frame says before it is dispatched: its id, method and kind read in one borrowing
//! pass (`Peek`), ids compared by value (`IdKey`: `1`, `1.0` and `1e0` are one id), a
//! `$/cancelRequest`'s target, and error replies written by hand.

use std::borrow::Cow;

use jsonrpsee::types::{ErrorObject, Id};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// The fields of a message needed to route it, borrowed from the message.
#[derive(Default)]
pub(crate) struct Peek<'a> {
    pub(crate) id: Option<Id<'a>>,
    pub(crate) method: Option<Cow<'a, str>>,
    /// `Some` whenever the member is there, even as `null` (a valid result).
    pub(crate) result: Option<&'a RawValue>,
    pub(crate) error: Option<&'a RawValue>,
    /// An `id` member that is not a valid id (a boolean, an array, an object): the message
    /// gets -32600 with a null id, as JSON-RPC requires, rather than no answer.
    pub(crate) bad_id: bool,
    /// An id jsonrpsee would not give back as sent: a number it cannot hold (negative,
    /// fractional, with an exponent, beyond 64 bits), or a string with escapes (which it would
    /// write back unescaped). Valid JSON-RPC, so it is carried through under an alias
    /// ([`IdAlias`](crate::ids::IdAlias)) and comes back byte for byte.
    pub(crate) aliased_id: Option<&'a RawValue>,
    /// The text of the first `id` member, whatever its type.
    pub(crate) raw_id: Option<&'a RawValue>,
    /// Whether an `id` member was read (a second one makes the id invalid).
    pub(crate) saw_id: bool,
    /// Whether `jsonrpc` is `"2.0"`: only then is a message without an id a notification
    /// (otherwise jsonrpsee answers it -32600).
    pub(crate) version_2: bool,
    /// Whether a `result` or `error` member began, even if its value was not read (an
    /// oversized response is cut inside it).
    saw_outcome: bool,
}

impl<'a> Peek<'a> {
    /// Reads the routing fields of a single message, which must be a JSON object.
    ///
    /// Reading stops once a call's `method` and `id` are known: what follows is its params,
    /// which can be megabytes, and jsonrpsee or the method reads those anyway.
    pub(crate) fn of(body: &'a [u8]) -> Option<Peek<'a>> {
        // serde would also read an array into the struct, field by field.
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        let mut peek = Peek::default();
        let mut stopped_early = false;
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        let read = deserializer.deserialize_map(PeekVisitor {
            peek: &mut peek,
            stopped_early: &mut stopped_early,
        });
        match read {
            Ok(()) => deserializer.end().ok().map(|()| peek),
            Err(_) if stopped_early => Some(peek),
            Err(_) => None,
        }
    }

    /// The id of a message of which only the first bytes `prefix` are known (an oversized
    /// one), as JSON text, when it can be read there: a string or a number (`None` for any
    /// other, or when the id is not in the prefix).
    pub(crate) fn id_in_prefix(prefix: &[u8]) -> Option<&RawValue> {
        let peek = Self::of_prefix(prefix)?;
        let raw = peek.raw_id.filter(|_| !peek.bad_id)?;
        // A number cut by the end of the prefix would read as another number.
        let end = raw.get().as_ptr() as usize - prefix.as_ptr() as usize + raw.get().len();
        let valid = raw
            .get()
            .starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit());
        (valid && end < prefix.len()).then_some(raw)
    }

    /// Whether the message of which only the first bytes `prefix` are known (an oversized
    /// one) is a response to one of our requests: a `result` or `error` member began before
    /// any `method`. A response is never answered, however large.
    pub(crate) fn response_in_prefix(prefix: &[u8]) -> bool {
        Self::of_prefix(prefix).is_some_and(|peek| peek.method.is_none() && peek.saw_outcome)
    }

    /// What the first bytes of a message say, when it is a JSON object.
    fn of_prefix(prefix: &[u8]) -> Option<Peek<'_>> {
        if prefix.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        let mut peek = Peek::default();
        let mut stopped_early = false;
        let mut deserializer = serde_json::Deserializer::from_slice(prefix);
        // The prefix ends somewhere in the message: reading fails there, and what was read
        // before is what counts.
        let _ = deserializer.deserialize_map(PeekVisitor {
            peek: &mut peek,
            stopped_early: &mut stopped_early,
        });
        Some(peek)
    }

    pub(crate) fn is_call(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }

    /// Whether jsonrpsee takes this message for a notification: a `method` string and
    /// `"jsonrpc": "2.0"`, without an `id` member.
    pub(crate) fn is_notification(&self) -> bool {
        self.method.is_some() && self.version_2 && !self.saw_id
    }
    /// Whether this is the client's response to one of our requests rather than a call.
    ///
    /// The `id` is not required: answering an id-less error response would only invite
    /// the client to answer that in turn.
    pub(crate) fn is_response(&self) -> bool {
        self.method.is_none() && (self.result.is_some() || self.error.is_some())
    }
}

/// Fills a [`Peek`] member by member, and stops (with an error the caller expects) as soon
/// as the message is known to be a call with an id.
pub(crate) struct PeekVisitor<'p, 'a> {
    pub(crate) peek: &'p mut Peek<'a>,
    pub(crate) stopped_early: &'p mut bool,
}

impl<'de> Visitor<'de> for PeekVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        loop {
            if self.peek.is_call() {
                *self.stopped_early = true;
                return Err(de::Error::custom("routing fields read"));
            }
            let Some(key) = map.next_key::<Cow<'de, str>>()? else {
                return Ok(());
            };
            match key.as_ref() {
                "id" if self.peek.saw_id => {
                    // Two ids: which one to answer is anyone's guess.
                    map.next_value::<de::IgnoredAny>()?;
                    self.peek.id = None;
                    self.peek.aliased_id = None;
                    self.peek.bad_id = true;
                }
                "id" => {
                    self.peek.saw_id = true;
                    let raw: &'de RawValue = map.next_value()?;
                    self.peek.raw_id = Some(raw);
                    match serde_json::from_str::<Id<'de>>(raw.get()) {
                        Ok(Id::Str(_)) if raw.get().contains('\\') => self.peek.aliased_id = Some(raw),
                        Ok(id) => self.peek.id = Some(id),
                        Err(_) if raw.get().starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
                            self.peek.aliased_id = Some(raw);
                        }
                        Err(_) => self.peek.bad_id = true,
                    }
                }
                // A method that is not a string leaves the call to jsonrpsee, which answers
                // it with -32600 under the call's id.
                "method" => {
                    let raw: &'de RawValue = map.next_value()?;
                    self.peek.method = serde_json::from_str::<Cow<'de, str>>(raw.get()).ok();
                }
                "jsonrpc" => {
                    let raw: &'de RawValue = map.next_value()?;
                    self.peek.version_2 = raw.get() == r#""2.0""#;
                }
                "result" => {
                    self.peek.saw_outcome = true;
                    self.peek.result = Some(map.next_value()?);
                }
                "error" => {
                    self.peek.saw_outcome = true;
                    self.peek.error = Some(map.next_value()?);
                }
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
    }
}

/// An LSP `$/cancelRequest` notification.
#[derive(Deserialize)]
pub(crate) struct Cancel<'a> {
    #[serde(borrow)]
    pub(crate) params: CancelParams<'a>,
}

#[derive(Deserialize)]
pub(crate) struct CancelParams<'a> {
    /// Any id a call may have; see [`IdKey`].
    #[serde(borrow)]
    pub(crate) id: &'a RawValue,
}

/// An error reply carrying `id` (JSON text, written as it is; `None` for `null`).
pub(crate) fn error_reply(id: Option<&RawValue>, error: &ErrorObject<'_>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Reply<'a> {
        jsonrpc: &'static str,
        id: Option<&'a RawValue>,
        error: &'a ErrorObject<'a>,
    }
    let reply = Reply {
        jsonrpc: "2.0",
        id,
        error,
    };
    serde_json::to_vec(&reply).expect("an error object and a JSON id always serialize")
}

/// A call's id as a `$/cancelRequest` names it: a string by its value, a number by its value
/// (so `-7`, `1.5`, `1e3` cancel the calls sent with them, and `1e3` also the call `1000`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum IdKey {
    Str(String),
    /// [`canonical_number`]'s text.
    Num(String),
}

impl IdKey {
    /// The key of the id whose JSON text is `raw`; `None` if it is neither a string nor a number.
    pub(crate) fn of(raw: &str) -> Option<IdKey> {
        let raw = raw.trim();
        if raw.starts_with('"') {
            serde_json::from_str(raw).ok().map(IdKey::Str)
        } else {
            canonical_number(raw).map(IdKey::Num)
        }
    }
}

/// The JSON number `raw` as `[-]<digits>e<exponent>`, its digits without leading or trailing
/// zeros (`0` for zero): the same text for the same value, however it was written, and exact
/// for any number of digits. `None` if `raw` is not a JSON number (or its exponent is huge).
pub(crate) fn canonical_number(raw: &str) -> Option<String> {
    let (negative, rest) = match raw.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let (mantissa, exponent) = match rest.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits_only(int) || !(frac.is_empty() || digits_only(frac)) || mantissa.ends_with('.') {
        return None;
    }
    let digits = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some("0".to_owned());
    }
    let shift = i64::try_from(significant.len() - trimmed.len()).ok()? - i64::try_from(frac.len()).ok()?;
    let exponent = exponent.checked_add(shift)?;
    let sign = if negative { "-" } else { "" };
    Some(format!("{sign}{trimmed}e{exponent}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_name_the_same_id_by_value() {
        let key = |raw: &str| IdKey::of(raw);
        for (a, b) in [
            ("1e3", "1000"),
            ("1000", "1.000e+3"),
            ("-0", "0.0"),
            ("-7", "-70e-1"),
            ("0.25", "25E-2"),
        ] {
            assert_eq!(key(a), key(b), "{a} {b}");
            assert!(key(a).is_some());
        }
        for (a, b) in [
            ("1", "-1"),
            ("18446744073709551616", "18446744073709551617"),
            ("1", r#""1""#),
        ] {
            assert_ne!(key(a), key(b), "{a} {b}");
        }
        assert_eq!(key(r#""q\u00e9""#), key(r#""qé""#));
        for invalid in ["true", "null", "{}", "1.", ".5", "1e", "--1", "1e99999999999999999999"] {
            assert_eq!(key(invalid), None, "{invalid}");
        }
    }

    #[test]
    fn an_oversized_message_s_id_is_read_from_its_prefix() {
        let id = |prefix: &str| Peek::id_in_prefix(prefix.as_bytes()).map(|raw| raw.get().to_owned());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":"xx"#).as_deref(),
            Some("7")
        );
        assert_eq!(id(r#" {"id":-1.5e3,"params":["#).as_deref(), Some("-1.5e3"));
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":"a\"b","#).as_deref(), Some(r#""a\"b""#));
        // Cut inside the id, after params, of a type JSON-RPC does not allow, or not an object.
        for prefix in [
            r#"{"id":12"#,
            r#"{"id":"ab"#,
            r#"{"params":{"id":1},"x":"#,
            r#"{"id":true,"#,
            "[1,",
            r#"{"id":1,"id":2,"#,
        ] {
            assert_eq!(id(prefix), None, "{prefix}");
        }
    }
}
