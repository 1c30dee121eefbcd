//! `candidates.*`: learning candidates, run by the engine under the store's lock in arrival
//! order ([`satchel_protocol::LockScope::Memory`]; `candidates.list` reads at once).

use satchel_protocol::{
    EvaluateParams, EvaluateResult, FeedbackParams, FeedbackResult, ListParams, ListResult, ObserveParams,
    ObserveResult, RemoveParams, RemoveResult,
};

use super::Daemon;
use crate::error::RpcError;

impl Daemon {
    /// `candidates.observe`.
    pub fn candidates_observe(&self, params: ObserveParams) -> Result<ObserveResult, RpcError> {
        Ok(self.engine().candidates_observe(params)?)
    }

    /// `candidates.feedback`.
    pub fn candidates_feedback(&self, params: FeedbackParams) -> Result<FeedbackResult, RpcError> {
        Ok(self.engine().candidates_feedback(params)?)
    }

    /// `candidates.list`.
    pub fn candidates_list(&self, params: ListParams) -> Result<ListResult, RpcError> {
        Ok(self.engine().candidates_list(params)?)
    }

    /// `candidates.evaluate`.
    pub fn candidates_evaluate(&self, params: EvaluateParams) -> Result<EvaluateResult, RpcError> {
        Ok(self.engine().candidates_evaluate(params)?)
    }

    /// `candidates.remove`.
    pub fn candidates_remove(&self, params: RemoveParams) -> Result<RemoveResult, RpcError> {
        Ok(self.engine().candidates_remove(params)?)
    }
}
