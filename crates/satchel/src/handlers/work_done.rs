//! LSP work-done progress of a call's compaction, reported to the client that made the call:
//! the engine's progress sink turned into `window/workDoneProgress/create` and `$/progress`
//! notifications. The transport cancels the call by its token
//! (`window/workDoneProgress/cancel`) once [`ProgressCancel::register`] has it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use satchel_engine::{EngineError, ProgressSink};
use satchel_protocol::ProgressToken;
use serde_json::{Value, json};

use super::lock;
use crate::transport::{CallScope, ClientHandle, ProgressCancel, ProgressRegistration};

/// How long the client has to accept a progress token; without its answer there is no progress.
const CREATE_PROGRESS_TIMEOUT: Duration = Duration::from_secs(5);

/// Source of progress tokens, unique in this process.
static NEXT_PROGRESS: AtomicU64 = AtomicU64::new(1);

/// The stages of a model summary, for a call whose client declared `window.workDoneProgress`;
/// other calls get a sink that does nothing.
pub(super) fn progress_sink(progress: Option<Arc<WorkDone>>) -> ProgressSink {
    match progress {
        Some(progress) => Arc::new(move |stage, stages| progress.stage(stage, stages)),
        None => Arc::new(|_, _| {}),
    }
}

/// LSP work-done progress of one call's compaction: at its first stage the client is asked
/// to create a fresh token (`window/workDoneProgress/create`), and if it accepts, it gets
/// `$/progress` `begin`, a `report` per stage, and (when the call ends) a last `report` at
/// 100 % and `end`. A compaction that asks no model reports nothing.
///
/// When the call's params carried a `workDoneToken`, that token is used instead (nothing is
/// created), and since LSP allows one begin–end per token, a second compaction in the same
/// call goes on reporting under it.
///
/// The `begin` says `cancellable: true`: while the progress runs, LSP's
/// `window/workDoneProgress/cancel {token}` cancels the call as `$/cancelRequest` would.
pub(super) struct WorkDone {
    client: ClientHandle,
    /// Registers the running token for `window/workDoneProgress/cancel`.
    cancel: ProgressCancel,
    title: String,
    /// The client's own token (from the params), if it sent one.
    given: Option<Value>,
    state: Mutex<Progress>,
}

/// Where one call's progress is.
enum Progress {
    /// No stage yet.
    Idle,
    /// The client accepted `token`; `percentage` was the last one reported. While
    /// `_cancellable` lives, the token cancels the call.
    Running {
        token: Value,
        percentage: usize,
        _cancellable: Option<ProgressRegistration>,
    },
    /// The client refused the token or did not answer: no progress for this call.
    Refused,
}

impl WorkDone {
    /// Progress under a token the client is asked to create.
    pub(super) fn new(scope: &CallScope, session_id: &str) -> Self {
        WorkDone {
            client: scope.client.clone(),
            cancel: scope.progress.clone(),
            title: format!("Compacting {session_id}"),
            given: None,
            state: Mutex::new(Progress::Idle),
        }
    }

    /// Progress under the client's own `workDoneToken`.
    pub(super) fn under(scope: &CallScope, session_id: &str, token: ProgressToken) -> Self {
        WorkDone {
            given: Some(serde_json::to_value(token).unwrap_or_default()),
            ..WorkDone::new(scope, session_id)
        }
    }

    /// Stage `stage` of `stages` (1-based) is about to ask the model.
    fn stage(&self, stage: usize, stages: usize) {
        let mut state = lock(&self.state);
        // A second compaction in the same call starts over under a fresh token.
        if stage == 1
            && self.given.is_none()
            && let Progress::Running { token, .. } = &*state
        {
            self.send_end(token, None);
            *state = Progress::Idle;
        }
        if let Progress::Idle = *state {
            *state = self.begin();
        }
        let Progress::Running { token, percentage, .. } = &mut *state else {
            return;
        };
        // Never backwards, and 100 only once the call is done.
        *percentage = (100 * stage.saturating_sub(1) / stages.max(1)).clamp(*percentage, 99);
        self.send(
            token,
            json!({
                "kind": "report",
                "message": format!("summarising stage {stage} of {stages}"),
                "percentage": *percentage,
            }),
        );
    }

    /// Asks the client for a fresh token and begins the progress under it.
    fn begin(&self) -> Progress {
        if let Some(token) = &self.given {
            return self.begun(token.clone());
        }
        let token = Value::from(format!(
            "satchel-progress-{}",
            NEXT_PROGRESS.fetch_add(1, Ordering::Relaxed)
        ));
        let created = self.client.request_blocking(
            "window/workDoneProgress/create",
            json!({ "token": token }),
            CREATE_PROGRESS_TIMEOUT,
        );
        if let Err(e) = created {
            tracing::debug!(
                %token,
                "no progress reported: window/workDoneProgress/create failed: {e}"
            );
            return Progress::Refused;
        }
        self.begun(token)
    }

    /// Sends `begin` under `token`, from when on the token cancels the call.
    fn begun(&self, token: Value) -> Progress {
        let cancellable = self.cancel.register(&token);
        self.send(
            &token,
            json!({"kind": "begin", "title": self.title, "cancellable": true, "percentage": 0}),
        );
        Progress::Running {
            token,
            percentage: 0,
            _cancellable: cancellable,
        }
    }

    /// The call is over: the progress, if any, reaches 100 % (when the call succeeded) and ends.
    pub(super) fn end(&self, error: Option<&EngineError>) {
        let state = std::mem::replace(&mut *lock(&self.state), Progress::Idle);
        if let Progress::Running { token, .. } = state {
            self.send_end(&token, error);
        }
    }

    fn send_end(&self, token: &Value, error: Option<&EngineError>) {
        let message = match error {
            None => {
                self.send(
                    token,
                    json!({"kind": "report", "message": "summarised", "percentage": 100}),
                );
                "done".to_owned()
            }
            Some(EngineError::Cancelled) => "cancelled".to_owned(),
            Some(e) => format!("failed: {e}"),
        };
        self.send(token, json!({"kind": "end", "message": message}));
    }

    fn send(&self, token: &Value, value: Value) {
        self.client
            .notify("$/progress", json!({"token": token, "value": value}));
    }
}
