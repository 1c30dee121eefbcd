//! The one table of summary fields, shared by the extractive and the model-written summaries:
//! each list of a [`CompactSummary`], how to reach it, its wire name, and the order in which
//! the budget serves them.

use satchel_protocol::{CompactSummary, IdentifierList};

/// A list of a [`CompactSummary`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// Goal statements besides the user's requests (a model's, or an older summary's).
    Goal,
    /// The user's constraints and preferences.
    Constraints,
    /// Completed work.
    Done,
    /// Work under way.
    InProgress,
    /// Failures not yet resolved.
    Blocked,
    /// Decisions and their reasons.
    Decisions,
    /// What comes next.
    NextSteps,
    /// Files created or changed.
    FilesModified,
    /// Files read or referenced.
    FilesRead,
    /// Commands run.
    Commands,
    /// Error lines of failing results.
    Errors,
    /// Other exact names.
    Notes,
    /// Values found in a tool's output and used afterwards.
    Findings,
}

impl Field {
    /// Every field, in rendering order.
    pub const ALL: [Field; 13] = [
        Field::Goal,
        Field::Constraints,
        Field::Done,
        Field::InProgress,
        Field::Blocked,
        Field::Decisions,
        Field::NextSteps,
        Field::FilesModified,
        Field::FilesRead,
        Field::Commands,
        Field::Errors,
        Field::Notes,
        Field::Findings,
    ];

    /// The order in which the budget serves the fields when nothing steers it: the user's
    /// words, then the current blocker and what was found, decisions, progress, next steps,
    /// and the identifier lists last (they are compressed, not dropped, when they do not fit).
    pub const PRIORITY: [Field; 13] = [
        Field::Goal,
        Field::Constraints,
        Field::Blocked,
        Field::Findings,
        Field::Decisions,
        Field::Done,
        Field::InProgress,
        Field::NextSteps,
        Field::FilesModified,
        Field::Errors,
        Field::Commands,
        Field::FilesRead,
        Field::Notes,
    ];

    /// The list in `summary`.
    pub fn of(self, summary: &CompactSummary) -> &Vec<String> {
        let ctx = &summary.critical_context;
        match self {
            Field::Goal => &summary.goal,
            Field::Constraints => &summary.constraints,
            Field::Done => &summary.done,
            Field::InProgress => &summary.in_progress,
            Field::Blocked => &summary.blocked,
            Field::Decisions => &summary.key_decisions,
            Field::NextSteps => &summary.next_steps,
            Field::FilesRead => &ctx.files_read,
            Field::FilesModified => &ctx.files_modified,
            Field::Commands => &ctx.commands,
            Field::Errors => &ctx.errors,
            Field::Notes => &ctx.notes,
            Field::Findings => &ctx.findings,
        }
    }

    /// The list in `summary`, mutably.
    pub fn of_mut(self, summary: &mut CompactSummary) -> &mut Vec<String> {
        let ctx = &mut summary.critical_context;
        match self {
            Field::Goal => &mut summary.goal,
            Field::Constraints => &mut summary.constraints,
            Field::Done => &mut summary.done,
            Field::InProgress => &mut summary.in_progress,
            Field::Blocked => &mut summary.blocked,
            Field::Decisions => &mut summary.key_decisions,
            Field::NextSteps => &mut summary.next_steps,
            Field::FilesRead => &mut ctx.files_read,
            Field::FilesModified => &mut ctx.files_modified,
            Field::Commands => &mut ctx.commands,
            Field::Errors => &mut ctx.errors,
            Field::Notes => &mut ctx.notes,
            Field::Findings => &mut ctx.findings,
        }
    }

    /// The identifier list this field is, if it is one: its items are exact names, kept
    /// byte for byte, and compressed into counted groups rather than dropped.
    pub fn identifier_list(self) -> Option<IdentifierList> {
        Some(match self {
            Field::FilesRead => IdentifierList::FilesRead,
            Field::FilesModified => IdentifierList::FilesModified,
            Field::Commands => IdentifierList::Commands,
            Field::Errors => IdentifierList::Errors,
            Field::Notes => IdentifierList::Notes,
            _ => return None,
        })
    }

    /// The list omitted items of this field are counted in: the identifier lists, and the
    /// constraints, which are counted rather than dropped when even their openings do not fit.
    pub fn omission_list(self) -> Option<IdentifierList> {
        match self {
            Field::Constraints => Some(IdentifierList::Constraints),
            _ => self.identifier_list(),
        }
    }

    /// Whether the extractive summariser guarantees this list's items verbatim (notes are
    /// exact too, but only a convenience).
    pub fn is_identifier(self) -> bool {
        matches!(
            self,
            Field::FilesRead | Field::FilesModified | Field::Commands | Field::Errors
        )
    }

    /// The field's name as reports and instructions use it.
    pub fn name(self) -> &'static str {
        match self {
            Field::Goal => "goal",
            Field::Constraints => "constraints",
            Field::Done => "done",
            Field::InProgress => "in progress",
            Field::Blocked => "blocked",
            Field::Decisions => "key decisions",
            Field::NextSteps => "next steps",
            Field::FilesModified => "files modified",
            Field::FilesRead => "files read",
            Field::Commands => "commands",
            Field::Errors => "errors",
            Field::Notes => "notes",
            Field::Findings => "findings",
        }
    }
}

/// The field of an identifier list.
pub fn field_of_list(list: IdentifierList) -> Field {
    match list {
        IdentifierList::FilesRead => Field::FilesRead,
        IdentifierList::FilesModified => Field::FilesModified,
        IdentifierList::Commands => Field::Commands,
        IdentifierList::Errors => Field::Errors,
        IdentifierList::Notes => Field::Notes,
        IdentifierList::Constraints => Field::Constraints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_complete_and_consistent() {
        let mut summary = CompactSummary::default();
        for (i, field) in Field::ALL.into_iter().enumerate() {
            field.of_mut(&mut summary).push(i.to_string());
            assert!(Field::PRIORITY.contains(&field));
            if let Some(list) = field.identifier_list() {
                assert_eq!(field_of_list(list), field);
            }
        }
        for (i, field) in Field::ALL.into_iter().enumerate() {
            assert_eq!(field.of(&summary), &[i.to_string()], "{}", field.name());
        }
    }
}
