//! The size of a call's result, known before the call commits: a result the transport could
//! not deliver must fail the call while it can still have no effect, or a client retrying
//! after the error would append its messages twice.

use std::io;

use serde::Serialize;

use crate::error::EngineError;

/// Counts bytes written, keeping none.
struct Counter(usize);

impl io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Bytes of `value` as compact JSON. Shared JSON texts (`RawValue`s) are counted without
/// being copied, so a result of megabytes costs a pass over its small parts.
pub(crate) fn json_bytes(value: &impl Serialize) -> usize {
    let mut counter = Counter(0);
    // Writing into the counter cannot fail, and every satchel value serialises.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Refuses a result of `bytes` over `limit`.
pub(crate) fn check(bytes: usize, limit: Option<usize>) -> Result<(), EngineError> {
    match limit {
        Some(limit) if bytes > limit => Err(EngineError::ResultTooLarge { bytes, limit }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::value::to_raw_value;

    #[test]
    fn counts_exactly_what_serde_writes_shared_texts_included() {
        let raw = to_raw_value(&json!({"role": "user", "content": "é\n\"quoted\""})).unwrap();
        let value = json!({"messages": [raw.get()], "n": 1});
        let with_raw = (vec![&raw, &raw], 7);
        assert_eq!(json_bytes(&value), serde_json::to_string(&value).unwrap().len());
        assert_eq!(json_bytes(&with_raw), serde_json::to_string(&with_raw).unwrap().len());
    }

    #[test]
    fn only_a_result_over_the_limit_is_refused() {
        assert!(check(10, Some(10)).is_ok());
        assert!(check(10, None).is_ok());
        assert!(matches!(
            check(11, Some(10)),
            Err(EngineError::ResultTooLarge { bytes: 11, limit: 10 })
        ));
    }
}
