//! Content hashes that recognise a message however a client re-encodes it.
//!
//! Clients resend their whole history on every call, and many of them parse what satchel
//! returned and serialise it again in their own style: other whitespace, other key order,
//! `\u00e9` for `é`. Comparing bytes would miss all of those, and parsing every resent message
//! into a tree just to compare it would cost as much as the rest of the call. A
//! [`MessageHash`] is a hash of the JSON *value*, computed straight from the text by a serde
//! visitor (no tree is built) or from a [`Value`] already in memory, and both give the same
//! hash for the same value.

use std::fmt;
use std::str::FromStr;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use xxhash_rust::xxh3::{xxh3_128, xxh3_128_with_seed};

/// The identity of a JSON value: equal for equal values, whatever the key order, whitespace
/// or string escapes of the text it came from. 128 bits, so collisions are not a concern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageHash(u128);

/// Domain tags, so that e.g. the string `"1"` and the number `1` never hash alike.
mod tag {
    pub const NULL: u64 = 0;
    pub const FALSE: u64 = 1;
    pub const TRUE: u64 = 2;
    pub const UNSIGNED: u64 = 3;
    pub const SIGNED: u64 = 4;
    pub const FLOAT: u64 = 5;
    pub const STRING: u64 = 6;
    pub const ARRAY: u64 = 7;
    pub const OBJECT: u64 = 8;
}

fn leaf(tag: u64, bytes: &[u8]) -> u128 {
    xxh3_128_with_seed(bytes, tag)
}

/// Order-sensitive combination of two hashes.
fn mix(a: u128, b: u128) -> u128 {
    let mut buf = [0u8; 32];
    buf[..16].copy_from_slice(&a.to_le_bytes());
    buf[16..].copy_from_slice(&b.to_le_bytes());
    xxh3_128(&buf)
}

/// An object's members are summed, which makes the hash independent of their order.
fn object(members: usize, sum: u128) -> u128 {
    mix(leaf(tag::OBJECT, &(members as u64).to_le_bytes()), sum)
}

fn member(key: u128, value: u128) -> u128 {
    mix(key, value)
}

impl MessageHash {
    /// The hash of a value in memory.
    pub fn of_value(value: &Value) -> Self {
        MessageHash(value_hash(value))
    }

    /// The hash of the JSON text `json`, without building its tree. Fails on invalid JSON.
    pub fn of_json(json: &str) -> Result<Self, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let hash = HashSeed.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(MessageHash(hash))
    }

    /// The hash as bytes, to feed into another hash.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }
}

/// A hash of the exact bytes of a JSON text: two orders of magnitude cheaper than
/// [`MessageHash::of_json`], and enough to recognise a message a client resends in the very
/// bytes it sent before, which is what most clients do.
pub fn text_hash(json: &str) -> u128 {
    xxh3_128(json.as_bytes())
}

fn value_hash(value: &Value) -> u128 {
    match value {
        Value::Null => leaf(tag::NULL, &[]),
        Value::Bool(false) => leaf(tag::FALSE, &[]),
        Value::Bool(true) => leaf(tag::TRUE, &[]),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                leaf(tag::UNSIGNED, &u.to_le_bytes())
            } else if let Some(i) = n.as_i64() {
                leaf(tag::SIGNED, &i.to_le_bytes())
            } else {
                leaf(tag::FLOAT, &n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes())
            }
        }
        Value::String(s) => leaf(tag::STRING, s.as_bytes()),
        Value::Array(items) => items
            .iter()
            .fold(leaf(tag::ARRAY, &[]), |h, item| mix(h, value_hash(item))),
        Value::Object(fields) => {
            let sum = fields.iter().fold(0u128, |sum, (k, v)| {
                sum.wrapping_add(member(leaf(tag::STRING, k.as_bytes()), value_hash(v)))
            });
            object(fields.len(), sum)
        }
    }
}

/// Hashes whatever value the deserializer holds, visiting it without storing it.
struct HashSeed;

impl<'de> DeserializeSeed<'de> for HashSeed {
    type Value = u128;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u128, D::Error> {
        deserializer.deserialize_any(HashVisitor)
    }
}

struct HashVisitor;

impl<'de> Visitor<'de> for HashVisitor {
    type Value = u128;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<u128, E> {
        Ok(leaf(tag::NULL, &[]))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<u128, E> {
        Ok(leaf(if v { tag::TRUE } else { tag::FALSE }, &[]))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u128, E> {
        Ok(leaf(tag::UNSIGNED, &v.to_le_bytes()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u128, E> {
        // serde_json reports non-negative integers through `visit_u64`; keep the two paths equal anyway.
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Ok(leaf(tag::SIGNED, &v.to_le_bytes())),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u128, E> {
        Ok(leaf(tag::FLOAT, &v.to_bits().to_le_bytes()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u128, E> {
        Ok(leaf(tag::STRING, v.as_bytes()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u128, A::Error> {
        let mut h = leaf(tag::ARRAY, &[]);
        while let Some(item) = seq.next_element_seed(HashSeed)? {
            h = mix(h, item);
        }
        Ok(h)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u128, A::Error> {
        let (mut sum, mut members) = (0u128, 0usize);
        while let Some(key) = map.next_key_seed(HashSeed)? {
            let value = map.next_value_seed(HashSeed)?;
            sum = sum.wrapping_add(member(key, value));
            members += 1;
        }
        Ok(object(members, sum))
    }
}

impl fmt::Display for MessageHash {
    /// 32 lowercase hex digits, the form stored in session logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A stored hash that is not 32 hex digits (e.g. written by an older satchel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAMessageHash;

impl FromStr for MessageHash {
    type Err = NotAMessageHash;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 {
            return Err(NotAMessageHash);
        }
        u128::from_str_radix(s, 16)
            .map(MessageHash)
            .map_err(|_| NotAMessageHash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn h(json: &str) -> MessageHash {
        MessageHash::of_json(json).unwrap()
    }

    #[test]
    fn ignores_whitespace_key_order_and_escapes() {
        let a = h(r#"{"role":"tool","content":"é\n","n":[1,-2,3.5,null,true]}"#);
        let b = h("{ \"n\" : [1, -2, 3.5, null, true],\n  \"content\": \"\\u00e9\\n\", \"role\": \"tool\" }");
        assert_eq!(a, b);
        assert_eq!(
            a,
            MessageHash::of_value(&json!({"role": "tool", "content": "é\n", "n": [1, -2, 3.5, null, true]}))
        );
    }

    #[test]
    fn tells_apart_values_that_print_alike_in_some_way() {
        let distinct = [
            r#""1""#,
            "1",
            "1.0",
            "-1",
            "[1,2]",
            "[2,1]",
            "[[1],2]",
            "[1,[2]]",
            r#"{"a":1,"b":2}"#,
            r#"{"a":2,"b":1}"#,
            r#"{"ab":1}"#,
            "{}",
            "[]",
            "null",
            r#""""#,
            "false",
        ];
        let hashes: std::collections::HashSet<_> = distinct.iter().map(|j| h(j)).collect();
        assert_eq!(hashes.len(), distinct.len());
    }

    #[test]
    fn round_trips_through_its_stored_form() {
        let hash = h(r#"{"role":"user","content":"hi"}"#);
        assert_eq!(hash.to_string().len(), 32);
        assert_eq!(hash.to_string().parse::<MessageHash>(), Ok(hash));
        assert_eq!("ab".repeat(32).parse::<MessageHash>(), Err(NotAMessageHash));
    }

    #[test]
    fn rejects_invalid_json() {
        assert!(MessageHash::of_json("{\"a\":").is_err());
        assert!(MessageHash::of_json("{} {}").is_err());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            (-1e12f64..1e12).prop_map(|f| json!(f)),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-z\"\\\\é]{0,4}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn text_and_tree_hash_alike(value in json_value()) {
            let compact = serde_json::to_string(&value).unwrap();
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            let expected = MessageHash::of_value(&value);
            prop_assert_eq!(MessageHash::of_json(&compact).unwrap(), expected);
            prop_assert_eq!(MessageHash::of_json(&pretty).unwrap(), expected);
        }

        #[test]
        fn reordered_members_hash_alike(members in prop::collection::vec(("[a-z]{1,6}", json_value()), 0..8)) {
            let forward: serde_json::Map<String, Value> = members.iter().cloned().collect();
            let backward: serde_json::Map<String, Value> = forward.clone().into_iter().rev().collect();
            prop_assert_eq!(MessageHash::of_value(&Value::Object(forward)), MessageHash::of_value(&Value::Object(backward)));
        }
    }
}
