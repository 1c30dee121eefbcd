//! A request body as its top-level fields, each kept as the raw JSON text the client sent, so
//! that the proxy replaces `messages` (and at most `system`) and forwards every other field
//! byte for byte: no number is reformatted, no key reordered, no escape rewritten.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The top-level fields of a JSON object body, in the order sent (duplicates kept).
#[derive(Debug)]
pub struct Fields(Vec<(String, Box<RawValue>)>);

impl Fields {
    /// Reads `bytes` as a JSON object; an error says what is wrong in the provider's words.
    pub fn parse(bytes: &[u8]) -> Result<Fields, String> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let fields = de.deserialize_map(FieldsVisitor).map_err(|e| {
            if e.classify() == serde_json::error::Category::Data {
                "the request body must be a JSON object".to_owned()
            } else {
                format!("the request body is not valid JSON: {e}")
            }
        })?;
        de.end()
            .map_err(|e| format!("the request body is not valid JSON: {e}"))?;
        Ok(fields)
    }

    /// The raw text of the field `key` (the last one when sent twice, as a JSON parser
    /// reading the body would see it).
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// The body with `key`'s value replaced by `text` wherever it occurs; every other field
    /// keeps its bytes. (Separators are the compact `,` and `:`, which a provider reads the
    /// same as any other whitespace.)
    pub fn with_replaced(&self, replacements: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>() + 2);
        out.push(b'{');
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // A key is written from its decoded text: `serde_json` escapes it again.
            out.extend_from_slice(serde_json::to_string(key).unwrap_or_default().as_bytes());
            out.push(b':');
            let text = replacements
                .iter()
                .find(|(k, _)| k == key)
                .map_or(value.get(), |(_, text)| text);
            out.extend_from_slice(text.as_bytes());
        }
        out.push(b'}');
        out
    }
}

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(16));
        while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
            fields.push((key, value));
        }
        Ok(Fields(fields))
    }
}

/// Reads `raw` as `T`, for a field whose shape the proxy needs.
pub fn field_as<'a, T: serde::Deserialize<'a>>(raw: &'a RawValue) -> Result<T, serde_json::Error> {
    serde_json::from_str(raw.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_other_field_keeps_its_bytes() {
        let body = br#" {"model":"m", "max_tokens" : 1e3, "messages":[{"role":"user","content":"hi"}],"temperature":1.0,"x":"\u00e9"} "#;
        let fields = Fields::parse(body).unwrap();
        let out = fields.with_replaced(&[("messages", r#"[{"role":"user","content":"yo"}]"#)]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"model":"m","max_tokens":1e3,"messages":[{"role":"user","content":"yo"}],"temperature":1.0,"x":"\u00e9"}"#
        );
        assert_eq!(fields.get("model").unwrap().get(), r#""m""#);
    }

    #[test]
    fn a_body_that_is_no_object_is_refused_with_a_reason() {
        for (body, says) in [
            (&b"[1]"[..], "must be a JSON object"),
            (b"{\"a\":", "not valid JSON"),
            (b"{} x", "not valid JSON"),
            (b"", "not valid JSON"),
        ] {
            let error = Fields::parse(body).unwrap_err();
            assert!(error.contains(says), "{body:?}: {error}");
        }
    }
}
