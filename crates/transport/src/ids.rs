//! Ids the transport puts into a message before the method table reads it: a stand-in for
//! an id jsonrpsee cannot give back as sent ([`IdAlias`]), and an id for a notification that
//! runs as a call ([`give_id`]).

use jsonrpsee::types::Id;

/// An id jsonrpsee cannot give back as sent (its ids are strings, written back unescaped, and
/// unsigned 64-bit integers), replaced in the message by a string of the transport's own,
/// and put back in the reply as the client wrote it.
pub(crate) struct IdAlias {
    /// The JSON text of the stand-in id, quotes included.
    stand_in: String,
    /// The JSON text of the client's id.
    pub(crate) original: String,
}

impl IdAlias {
    /// Replaces the id at `start` in `body` (JSON text `original`) by a stand-in unique to
    /// this connection's call `seq`.
    pub(crate) fn put(body: &mut Vec<u8>, start: usize, original: String, seq: u64) -> Self {
        let stand_in = format!("\"satchel-alias-{seq}\"");
        body.splice(start..start + original.len(), stand_in.bytes());
        IdAlias { stand_in, original }
    }

    /// The reply with the client's id back in place of the stand-in (the first string equal
    /// to it: the envelope's `id` comes before the result).
    pub(crate) fn restore(&self, reply: Vec<u8>) -> Vec<u8> {
        let Some(at) = memchr::memmem::find(&reply, self.stand_in.as_bytes()) else {
            return reply;
        };
        let mut restored = Vec::with_capacity(reply.len());
        restored.extend_from_slice(&reply[..at]);
        restored.extend_from_slice(self.original.as_bytes());
        restored.extend_from_slice(&reply[at + self.stand_in.len()..]);
        restored
    }
}

/// Gives the notification `body` (a JSON object) an id of the transport's own, unique to
/// this connection's call `seq`, so that it runs like a call.
pub(crate) fn give_id(body: &mut Vec<u8>, seq: u64) -> Id<'static> {
    let id = format!("satchel-notification-{seq}");
    let open = body.iter().position(|b| *b == b'{').map_or(0, |at| at + 1);
    let field = format!(r#""id":"{id}","#);
    body.splice(open..open, field.bytes());
    Id::Str(id.into())
}
