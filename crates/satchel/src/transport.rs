//! satchel's instance of `satchel-transport`: its calls carry the engine's [`CallToken`], so
//! that a `$/cancelRequest` and the call's commit point decide on the same token. The rest of
//! the binary names the transport through this module.

use std::ops::Deref;

use satchel_engine::CallToken;

pub use satchel_transport::{
    ClientHandle, ClientRequestError, ProgressCancel, ProgressRegistration, TransportLimits, accept_loop, answer_call,
    serve_with_blocking_writer,
};

/// The engine's [`CallToken`] as the transport's cancellation: a cancel wins until the call
/// commits. (A type of the binary's own, since neither crate knows the other.)
#[derive(Debug, Clone, Default)]
pub struct EngineToken(CallToken);

impl satchel_transport::Cancellation for EngineToken {
    fn cancel(&self) -> bool {
        self.0.cancel()
    }

    fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

impl Deref for EngineToken {
    type Target = CallToken;

    fn deref(&self) -> &CallToken {
        &self.0
    }
}

/// What the transport gives each handler besides the params.
pub type CallScope = satchel_transport::CallScope<EngineToken>;

/// What the daemon serves on stdio and on its socket.
pub type Service = satchel_transport::Service<EngineToken>;

/// A method answered straight from the message text.
pub type DirectHandler = satchel_transport::DirectHandler<EngineToken>;
