//! Limits on what a client may send, checked at the edge before anything is stored.
//!
//! Satchel stores each message inside a record a level or two deeper (a session-log line, a
//! dialog-archive line) and reads those records back with `serde_json`, which refuses JSON
//! nested more than 127 levels. A message accepted must be one that can be stored and
//! reloaded, so messages are held to [`MAX_JSON_DEPTH`], far below that limit: the records
//! around a message, and the replies that carry it, always stay readable.

use serde_json::Value;

/// Most levels of arrays and objects a message (or the `system` value, or one tool
/// definition) may nest; the message object itself is the first level.
///
/// Half of `serde_json`'s own limit (127): stored records and replies wrap a message in a few
/// more levels, and the margin keeps that true for any wrapping satchel may add later.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether the JSON `text` nests arrays and objects more than `max` levels deep.
///
/// One pass over the bytes, counting `[` and `{` outside strings, without parsing: string
/// contents (most of a big message) are skipped with `memchr`. It stops at the first level
/// past `max`. `text` is expected to be valid JSON; for anything else the answer is only
/// about its brackets.
pub fn exceeds_depth(text: &str, max: usize) -> bool {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip to the closing quote: the next `"` not escaped by a `\`.
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                        Some(at) if bytes[i + at] == b'\\' => i += at + 2,
                        Some(at) => {
                            i += at;
                            break;
                        }
                        // An unterminated string: nothing more to count.
                        None => return false,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

/// Levels of arrays and objects in `value` (a scalar is 0, `{}` and `[]` are 1).
pub fn value_depth(value: &Value) -> usize {
    // Iterative, so no value can exhaust the stack however it was built.
    let mut deepest = 0;
    let mut pending = vec![(value, 0usize)];
    while let Some((value, above)) = pending.pop() {
        let depth = above + 1;
        match value {
            Value::Array(items) => pending.extend(items.iter().map(|child| (child, depth))),
            Value::Object(map) => pending.extend(map.values().map(|child| (child, depth))),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    deepest
}

/// What a value nested past [`MAX_JSON_DEPTH`] is told.
pub fn too_deep_message() -> String {
    format!("nests arrays and objects more than {MAX_JSON_DEPTH} levels deep (the limit)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// `depth` levels: objects `{"a": …}` around an innermost array of one string.
    fn nested(depth: usize, inner: &str) -> String {
        let mut text = serde_json::to_string(&json!([inner])).unwrap();
        for _ in 1..depth {
            text = format!(r#"{{"a":{text},"b":[]}}"#);
        }
        text
    }

    fn depth_of(text: &str) -> usize {
        (0..).find(|&max| !exceeds_depth(text, max)).unwrap()
    }

    #[test]
    fn counts_levels_of_arrays_and_objects() {
        for (text, depth) in [
            ("1", 0),
            (r#""x""#, 0),
            ("{}", 1),
            ("[]", 1),
            (r#"{"a":[1,{"b":[]}],"c":{}}"#, 4),
            (r#"[[],[],[[]]]"#, 3),
        ] {
            assert_eq!(depth_of(text), depth, "{text}");
            assert_eq!(value_depth(&serde_json::from_str(text).unwrap()), depth, "{text}");
        }
        for depth in [1, 2, 63, 64, 65, 126, 200] {
            let text = nested(depth, "x");
            assert_eq!(depth_of(&text), depth);
            assert_eq!(exceeds_depth(&text, MAX_JSON_DEPTH), depth > MAX_JSON_DEPTH);
        }
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let inner = r#"[[[{{{ \" ]]] \\" [[[ \\\" {{{ \u005b"#;
        let text = nested(3, inner);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["a"]["a"][0], json!(inner));
        assert_eq!(depth_of(&text), 3);
        let keys = r#"{"[[[[": {"}}}}\"{{": ["\\"]}}"#;
        assert_eq!(depth_of(keys), 3);
        assert_eq!(depth_of(r#"["[", "{", "\\", "]]]", "[{"]"#), 1);
    }

    #[test]
    fn stops_at_the_first_level_past_the_limit() {
        // An unbalanced text past the limit still answers; no level is counted below zero.
        assert!(exceeds_depth(&"[".repeat(1_000_000), MAX_JSON_DEPTH));
        assert!(!exceeds_depth(&"]".repeat(1_000), 0));
        assert!(!exceeds_depth(r#"["unterminated"#, 1));
    }

    #[test]
    fn a_message_at_the_limit_survives_the_records_around_it() {
        let message = nested(MAX_JSON_DEPTH, "deep");
        assert!(!exceeds_depth(&message, MAX_JSON_DEPTH));
        let value: Value = serde_json::from_str(&message).unwrap();
        // A reply ({"result":{"messages":[…]}}), a log or archive line, and then some.
        let mut wrapped = value.clone();
        for _ in 0..8 {
            wrapped = json!({ "wrap": [wrapped] });
        }
        let text = serde_json::to_string(&wrapped).unwrap();
        let back: Value = serde_json::from_str(&text).expect("serde_json reads it back");
        assert_eq!(back, wrapped);
        // While one past serde_json's own limit is what this guards against.
        let too_deep = nested(128, "x");
        assert!(serde_json::from_str::<Value>(&too_deep).is_err());
    }

    /// Values whose strings are full of brackets, quotes and backslashes.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(|n| json!(n)),
            "[\\[\\]{}\"\\\\a\\u{1}é]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(12, 64, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[\\[\\]{}\"\\\\]{0,3}", inner), 0..4)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_scan_agrees_with_the_tree(value in json_value()) {
            let depth = value_depth(&value);
            for text in [serde_json::to_string(&value).unwrap(), serde_json::to_string_pretty(&value).unwrap()] {
                prop_assert_eq!(depth_of(&text), depth, "{}", text);
            }
        }
    }
}
