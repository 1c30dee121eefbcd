//! Compaction instructions (`context.compact {instruction}`): which fields an instruction
//! names, whether it keeps only those ("keep requirements and decisions only") or serves them
//! first ("focus on errors and file paths"), and a sentence saying what it did.

use super::fields::Field;
use super::merge::Draft;

/// What an instruction asks of the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Steering {
    /// Keep these fields only (the user's requests are always kept).
    pub only: Option<Vec<Field>>,
    /// The field priority to fit with.
    pub priority: Vec<Field>,
    /// What the instruction did, for `context.inspect`.
    pub effect: String,
}

impl Steering {
    /// Reads `instruction`.
    pub fn of(instruction: &str) -> Steering {
        let lower = instruction.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let mut named: Vec<Field> = Vec::new();
        for word in &words {
            for &field in fields_named(word) {
                if !named.contains(&field) {
                    named.push(field);
                }
            }
        }
        let only = words.iter().any(|w| matches!(*w, "only" | "just" | "solely"));
        if named.is_empty() {
            return Steering {
                only: None,
                priority: Field::PRIORITY.to_vec(),
                effect: "no summary section named: default priorities".into(),
            };
        }
        let names = named.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ");
        if only {
            let mut kept = named.clone();
            if !kept.contains(&Field::Goal) {
                kept.insert(0, Field::Goal);
            }
            let kept_names: Vec<&str> = kept
                .iter()
                .map(|f| if *f == Field::Goal { "user requests" } else { f.name() })
                .collect();
            return Steering {
                priority: Field::PRIORITY.iter().copied().filter(|f| kept.contains(f)).collect(),
                effect: format!("kept only: {}", kept_names.join(", ")),
                only: Some(kept),
            };
        }
        let mut priority = named.clone();
        priority.extend(Field::PRIORITY.iter().filter(|f| !named.contains(f)));
        Steering {
            only: None,
            priority,
            effect: format!("served first: {names}"),
        }
    }

    /// Empties the fields the instruction does not keep.
    pub fn restrict(&self, draft: &mut Draft) {
        let Some(only) = &self.only else { return };
        for field in Field::ALL {
            if !only.contains(&field) {
                draft.list_mut(field).clear();
            }
        }
        draft
            .omitted
            .retain(|o| only.contains(&super::fields::field_of_list(o.list)));
    }
}

/// The fields a word of an instruction names.
fn fields_named(word: &str) -> &'static [Field] {
    const IDENTIFIERS: &[Field] = &[
        Field::FilesModified,
        Field::FilesRead,
        Field::Commands,
        Field::Errors,
        Field::Notes,
    ];
    match word {
        w if w.starts_with("requirement") => &[Field::Goal, Field::Constraints],
        w if w.starts_with("request") || w.starts_with("goal") || w.starts_with("task") => &[Field::Goal],
        w if w.starts_with("constraint") || w.starts_with("preference") || w.starts_with("rule") => {
            &[Field::Constraints]
        }
        w if w.starts_with("decision") => &[Field::Decisions],
        w if w.starts_with("progress") => &[Field::Done, Field::InProgress, Field::Blocked],
        "done" | "completed" => &[Field::Done],
        w if w.starts_with("block") => &[Field::Blocked],
        "next" | "step" | "steps" | "plan" | "plans" => &[Field::NextSteps],
        w if w.starts_with("file") || w.starts_with("path") => &[Field::FilesModified, Field::FilesRead],
        w if w.starts_with("command") => &[Field::Commands],
        w if w.starts_with("error") || w.starts_with("failure") => &[Field::Errors, Field::Blocked],
        w if w.starts_with("note") => &[Field::Notes],
        "context" | "identifiers" => IDENTIFIERS,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keeps_the_named_fields_and_the_requests() {
        let steering = Steering::of("keep requirements and decisions only");
        assert_eq!(
            steering.only,
            Some(vec![Field::Goal, Field::Constraints, Field::Decisions])
        );
        assert_eq!(steering.effect, "kept only: user requests, constraints, key decisions");
    }

    #[test]
    fn focus_serves_the_named_fields_first() {
        let steering = Steering::of("focus on errors and file paths");
        assert_eq!(steering.only, None);
        assert_eq!(
            steering.priority[..4],
            [Field::Errors, Field::Blocked, Field::FilesModified, Field::FilesRead]
        );
        assert_eq!(steering.priority.len(), Field::PRIORITY.len());
        assert_eq!(
            steering.effect,
            "served first: errors, blocked, files modified, files read"
        );
    }

    #[test]
    fn an_instruction_without_a_section_changes_nothing() {
        assert_eq!(Steering::of("be brief").priority, Field::PRIORITY);
    }
}
