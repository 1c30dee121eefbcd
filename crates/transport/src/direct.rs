//! A call answered straight from its text, for a [`DirectHandler`](crate::DirectHandler):
//! envelope and params read in one pass, the reply written into one buffer.

use std::borrow::Cow;

use jsonrpsee::types::{ErrorObjectOwned, Id};
use jsonrpsee::{MethodResponse, ResponsePayload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::TransportLimits;

/// A JSON-RPC call, read in one pass with its params.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a, P> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    id: Id<'a>,
    // Routing already chose the method; it is read only because a call carries it.
    #[serde(borrow, rename = "method")]
    _method: Cow<'a, str>,
    params: Option<ByName<P>>,
}

/// Params given by name. serde would also read a struct from an array, field by field, which
/// by-name params do not allow: an array fails here and the method table answers it.
struct ByName<P>(P);

impl<'de, P: Deserialize<'de>> Deserialize<'de> for ByName<P> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<P>(std::marker::PhantomData<P>);
        impl<'de, P: Deserialize<'de>> serde::de::Visitor<'de> for Fields<P> {
            type Value = ByName<P>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("params by name (an object)")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                P::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(ByName)
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// Answers one call directly: decodes it with its by-name params `P` in a single pass, runs
/// `handler` and encodes the reply as the method table would, within the reply limit of
/// `limits` (-32008 beyond). Anything unusual about the message (bad params included) returns `None`,
/// so that the method table answers it with the error it always gives.
pub fn answer_call<P, R, E>(
    body: &[u8],
    limits: TransportLimits,
    handler: impl FnOnce(P) -> Result<R, E>,
) -> Option<Vec<u8>>
where
    P: DeserializeOwned,
    R: Serialize + Clone,
    E: Into<ErrorObjectOwned>,
{
    let text = std::str::from_utf8(body).ok()?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let call: Call<'_, P> = Call::deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    let ByName(params) = call.params.filter(|_| call.jsonrpc == "2.0")?;
    let id = call.id.into_owned();
    let max_response_bytes = limits.max_response_bytes as usize;
    let reply = match handler(params) {
        Ok(result) => match success_reply(&id, &result, max_response_bytes) {
            Some(reply) => return Some(reply),
            // jsonrpsee's own answer to a result it cannot write: -32008 when too large.
            None => MethodResponse::response(id, ResponsePayload::success(result), max_response_bytes),
        },
        Err(e) => {
            let error: ErrorObjectOwned = e.into();
            MethodResponse::error(id, error)
        }
    };
    let json: Box<str> = reply.into_json().into();
    Some(json.into_boxed_bytes().into_vec())
}

/// The reply jsonrpsee would write for `result`, written straight into one buffer; `None` if
/// it is over `max_bytes` or cannot be written.
///
/// jsonrpsee's `MethodResponse::response` grows its buffer from 128 bytes and then parses the
/// whole reply again to check it: for a reply of megabytes, more work than the call itself.
fn success_reply<R: Serialize>(id: &Id, result: &R, max_bytes: usize) -> Option<Vec<u8>> {
    let mut reply = Vec::with_capacity(64 << 10);
    reply.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut reply, id).ok()?;
    reply.extend_from_slice(br#","result":"#);
    serde_json::to_writer(&mut reply, result).ok()?;
    reply.push(b'}');
    (reply.len() <= max_bytes).then_some(reply)
}
