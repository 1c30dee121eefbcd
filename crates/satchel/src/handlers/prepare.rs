//! `context.prepare`: the pre-reasoning hook, run by the engine in the session's turn.

use std::sync::Arc;

use satchel_core::limits::{MAX_JSON_DEPTH, too_deep_message, value_depth};
use satchel_core::summary::llm::Completer;
use satchel_engine::{CallContext, CallToken, ModelSource, Prepared};
use satchel_protocol::config::SummarizerKind;
use satchel_protocol::{Config, PrepareParams};
use satchel_proxy::UpstreamModel;
use serde_json::value::RawValue;

use super::Daemon;
use crate::error::RpcError;
use crate::llm::{OpenAiCompleter, UpstreamCompleter};
use crate::transport::CallScope;

impl Daemon {
    /// `context.prepare`.
    pub fn prepare(&self, mut params: PrepareParams<Box<RawValue>>, scope: &CallScope) -> Result<Prepared, RpcError> {
        check_depth(&params)?;
        if let Some(recall) = params.memory.take() {
            self.memory.add_recall(&mut params, &recall)?;
        }
        let config = self.effective_config(params.config.as_ref())?;
        let ticket = self.ticket(scope, &params.session_id)?;
        let session_id = params.session_id.clone();
        let work_done_token = params.work_done_token.take();
        let outcome = self.run_with_call(scope, &session_id, work_done_token, |call| {
            self.engine().prepare(ticket, params, &config, call)
        })?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }

    /// `context.prepare` for a caller that is no JSON-RPC connection (the provider proxy):
    /// the daemon's own configuration, no client to summarise with or report progress to,
    /// and no cancellation; watchers of the session are told as for any call. `upstream`, the
    /// request's own upstream and credentials, is lent to this call's summariser only and
    /// dropped when it returns.
    pub fn prepare_detached(
        &self,
        params: PrepareParams<Box<RawValue>>,
        upstream: UpstreamModel,
    ) -> Result<Prepared, RpcError> {
        check_depth(&params)?;
        let ticket = self.engine().ticket(&params.session_id)?;
        let publish = |event| self.publish(Some(event));
        let call = CallContext {
            models: &ProxiedModels(upstream),
            progress: Arc::new(|_, _| {}),
            events: &publish,
            token: CallToken::new(),
            max_result_bytes: None,
        };
        let outcome = self.engine().prepare(ticket, params, self.engine().config(), &call)?;
        self.publish(outcome.event);
        Ok(outcome.result)
    }
}

/// The models of a proxied request: the configured endpoint, and the request's own upstream.
struct ProxiedModels(UpstreamModel);

impl ModelSource for ProxiedModels {
    fn completer(&self, kind: SummarizerKind, config: &Config) -> Result<Box<dyn Completer + '_>, String> {
        match kind {
            SummarizerKind::Openai => Ok(Box::new(OpenAiCompleter::from_config(config))),
            SummarizerKind::Upstream => Ok(Box::new(UpstreamCompleter::new(&self.0, config))),
            SummarizerKind::Extractive => Err("the extractive summariser needs no model".into()),
            SummarizerKind::Client => Err("a proxied request has no client to summarise with".into()),
        }
    }
}

/// Refuses a `system` value or tool definition nested past [`MAX_JSON_DEPTH`], before anything
/// is stored (the engine checks the messages it has not seen, before it hashes them).
fn check_depth(params: &PrepareParams<Box<RawValue>>) -> Result<(), RpcError> {
    if params.system.as_ref().is_some_and(|s| value_depth(s) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params("system", too_deep_message()));
    }
    let tools = params.tools.as_deref().unwrap_or_default();
    if let Some(index) = tools.iter().position(|t| value_depth(t) > MAX_JSON_DEPTH) {
        return Err(RpcError::invalid_params(&format!("tools[{index}]"), too_deep_message()));
    }
    Ok(())
}
