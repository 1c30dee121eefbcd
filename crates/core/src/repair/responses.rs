//! The Responses repair: pairs by `call_id`, step by step.
//!
//! A step is a run of the assistant's items (reasoning, text, calls) followed by the outputs
//! that answer them. An output answers a call of its own step; the step ends at the next item
//! of the assistant after an output, or at a message of another role, and whatever it left
//! unanswered gets a synthetic output there: after the step's last item, so a reasoning item
//! is never separated from the calls it precedes.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{NO_RESULT, OpenCalls, Repair, RepairItem};
use crate::format::{self, MessageFormat};

const FORMAT: MessageFormat = MessageFormat::OpenaiResponses;

/// The calls of the current step, with the output type each one needs.
#[derive(Default)]
struct Step {
    calls: OpenCalls,
    output_types: HashMap<String, &'static str>,
}

impl Step {
    fn add(&mut self, item: &Value) {
        let (Some(output_type), Some(id)) = (format::output_type(item), item.get("call_id").and_then(Value::as_str))
        else {
            return;
        };
        self.calls.order.push(id.to_owned());
        *self.calls.waiting.entry(id.to_owned()).or_insert(0) += 1;
        self.output_types.insert(id.to_owned(), output_type);
    }

    /// Ends the step with a synthetic output for each call it left unanswered.
    fn close<M: RepairItem>(self, out: &mut Vec<M>, repairs: &mut Vec<Repair>) {
        let Step { calls, output_types } = self;
        for call_id in calls.unanswered() {
            repairs.push(Repair::SyntheticResult {
                index: out.len(),
                call_id: call_id.clone(),
            });
            let output_type = output_types.get(&call_id).copied().unwrap_or("function_call_output");
            out.push(M::from_value(
                json!({"type": output_type, "call_id": call_id, "output": NO_RESULT}),
            ));
        }
    }
}

pub(super) fn repair<M: RepairItem>(items: Vec<M>, allow_pending_tail: bool) -> (Vec<M>, Vec<Repair>) {
    let mut out = Vec::with_capacity(items.len());
    let mut repairs = Vec::new();
    let mut step = Step::default();
    let mut after_output = false;
    for item in items {
        if format::has_tool_result(item.value(), FORMAT) {
            let id = item.value().get("call_id").and_then(Value::as_str).unwrap_or("");
            if step.calls.answer(id) {
                out.push(item);
                after_output = true;
            } else {
                repairs.push(Repair::DroppedOrphanResult {
                    index: out.len(),
                    call_id: id.to_owned(),
                });
            }
            continue;
        }
        let assistant = format::role_of(item.value()) == Some("assistant");
        if !assistant || after_output {
            std::mem::take(&mut step).close(&mut out, &mut repairs);
        }
        if assistant {
            step.add(item.value());
        }
        after_output = false;
        out.push(item);
    }
    if !allow_pending_tail {
        step.close(&mut out, &mut repairs);
    }
    (out, repairs)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::format::check_pairs;
    use crate::repair::repair;

    use super::FORMAT;

    /// Repairs `items`, checks the result passes the pair check and that repairing again
    /// changes nothing, and compares the report and the items with the snapshot `name`.
    fn check(name: &str, items: Vec<Value>, allow_pending_tail: bool) {
        let (out, repairs) = repair(items, FORMAT, allow_pending_tail);
        assert_eq!(check_pairs(&out, FORMAT), Ok(()), "{out:#?}");
        assert_eq!(repair(out.clone(), FORMAT, allow_pending_tail), (out.clone(), vec![]));
        let mut text = String::new();
        for r in &repairs {
            text.push_str(&format!("{r:?}\n"));
        }
        text.push_str("--\n");
        for (i, item) in out.iter().enumerate() {
            text.push_str(&format!("{i} {item}\n"));
        }
        insta::assert_snapshot!(name, text);
    }

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    fn reasoning(n: u8) -> Value {
        json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": [], "encrypted_content": format!("gAAA{n}")})
    }

    fn exec(call_id: &str) -> Value {
        json!({"type": "function_call", "call_id": call_id, "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "status": "completed"})
    }

    fn patch(call_id: &str) -> Value {
        json!({"type": "custom_tool_call", "call_id": call_id, "name": "apply_patch", "input": "*** Begin Patch"})
    }

    fn output(call_id: &str) -> Value {
        json!({"type": "function_call_output", "call_id": call_id, "output": format!("out {call_id}"), "id": "fco_kept"})
    }

    #[test]
    fn a_valid_conversation_is_untouched() {
        let items = vec![
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be careful"}]}),
            user("go"),
            reasoning(1),
            exec("a"),
            exec("b"),
            output("b"),
            output("a"),
            reasoning(2),
            exec("c"),
            output("c"),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
            user("next"),
            reasoning(3),
            exec("d"),
        ];
        assert_eq!(repair(items.clone(), FORMAT, true), (items, vec![]));
    }

    #[test]
    fn unanswered_calls_get_an_output_of_their_kind_where_their_step_ends() {
        check(
            "responses_repair_synthetic",
            vec![
                user("go"),
                reasoning(1),
                exec("a"),
                patch("b"),
                output("a"),
                // A new step: `b` is answered before it, after `a`'s output.
                reasoning(2),
                exec("c"),
                // The user interrupted: `c` is answered before the user message.
                user("stop"),
                reasoning(3),
                exec("d"),
            ],
            false,
        );
    }

    #[test]
    fn a_pending_call_at_the_very_end_waits_when_allowed() {
        check(
            "responses_repair_pending_tail",
            vec![user("go"), exec("a"), exec("b"), output("b")],
            true,
        );
    }

    #[test]
    fn orphan_and_repeated_outputs_are_dropped() {
        check(
            "responses_repair_orphans",
            vec![
                output("early"),
                user("go"),
                reasoning(1),
                exec("a"),
                output("a"),
                output("a"),
                output("foreign"),
                user("next"),
                // Answers `a` after the conversation moved on.
                output("a"),
            ],
            false,
        );
    }
}
