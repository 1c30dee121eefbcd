//! `context.usage` (and `context.prepare {usage}`): the provider's real input tokens for the
//! session's last request correct satchel's counts from then on (F14).

use satchel_core::calibration::{calibrate, uncorrected};
use satchel_protocol::{Calibration, UsageParams};
use satchel_storage::SessionRecord;

use crate::call::CallToken;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::live::Ticket;
use crate::session::Session;

impl Engine {
    /// `context.usage`, in the session's turn.
    pub fn report_usage(
        &self,
        ticket: Ticket,
        params: UsageParams,
        token: &CallToken,
    ) -> Result<Calibration, EngineError> {
        self.transaction(ticket, token, |slot| {
            let Some(session) = slot.as_mut() else {
                return Err(EngineError::UnknownSession(params.session_id.clone()));
            };
            let calibration = self.record_usage(&params.session_id, session, params.input_tokens)?;
            if !token.commit() {
                return Err(EngineError::Cancelled);
            }
            Ok(calibration)
        })
    }

    /// Learns from `input_tokens`, the provider's count of the last request of `session`,
    /// and logs the new calibration durably. Call it inside the session's transaction.
    pub(crate) fn record_usage(
        &self,
        id: &str,
        session: &mut Session,
        input_tokens: u64,
    ) -> Result<Calibration, EngineError> {
        let (Some(last), Some(factor)) = (session.last_usage(), session.requests().last_factor) else {
            return Err(EngineError::invalid_params(
                "input_tokens",
                format!("session {id} has no request prepared since the daemon started to report usage for"),
            ));
        };
        if input_tokens == 0 {
            return Err(EngineError::invalid_params("input_tokens", "must be positive"));
        }
        let counted = uncorrected(last.total, factor);
        let requests = session.requests();
        let before = requests.calibration_before_report.unwrap_or(requests.calibration);
        let calibration = calibrate(&before, input_tokens, counted);
        self.sessions.append(id, &[SessionRecord::Calibration(calibration)])?;
        session.calibrate(before, calibration);
        Ok(calibration)
    }
}
