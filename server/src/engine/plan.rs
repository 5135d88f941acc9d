//! An agent's internal plan: goals, milestones, strategy and notes.
//!
//! The plan is replaced wholesale by a Plan Update in an LLM response (`parse.rs`) or by the
//! `agent_plan_replace` branch op, and rendered into the system prompt on every call. Its type
//! is the `plan_update` event's ([`PlanState`], in `simtree_shared`); this module renders it.
//! Goal and milestone fields are optional so a plan set by a branch op round-trips verbatim;
//! missing ones print as upstream prints them.

pub use simtree_shared::{Goal, Milestone, PlanState};

/// The plan block of the system prompt.
pub(crate) fn render(plan: &PlanState) -> String {
    let or = |v: &Option<String>, d: &str| v.clone().unwrap_or_else(|| d.to_string());
    // A heading, then one line per entry or "(none)".
    let list = |out: &mut String, heading: &str, lines: Vec<String>| {
        out.push_str(heading);
        if lines.is_empty() {
            out.push_str("(none)\n");
        }
        for line in lines {
            out.push_str(&format!("- {line}\n"));
        }
    };
    let mut out = String::from("Internal Plan State:\n");
    let goals = plan.goals.iter().map(|g| {
        let (id, desc, priority, status) =
            (or(&g.id, "?"), or(&g.desc, ""), or(&g.priority, ""), or(&g.status, "pending"));
        format!("[{id}] {desc} (priority: {priority}, status: {status})")
    });
    list(&mut out, "Internal Goals:\n", goals.collect());
    let milestones = plan.milestones.iter().map(|m| {
        let (id, desc, status) = (or(&m.id, "?"), or(&m.desc, ""), or(&m.status, "pending"));
        format!("[{id}] {desc} (status: {status})")
    });
    list(&mut out, "Internal Milestones:\n", milestones.collect());
    out.push_str(&format!("Internal Strategy:\n{}\nInternal Notes:\n{}\n", plan.strategy, plan.notes));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_missing_fields_like_upstream() {
        let plan = PlanState {
            goals: vec![Goal::default(), Goal::new("g1", "Win", "current")],
            milestones: vec![],
            strategy: "s".into(),
            notes: "".into(),
        };
        let text = render(&plan);
        assert!(text.contains("- [?]  (priority: , status: pending)\n"));
        assert!(text.contains("- [g1] Win (priority: normal, status: current)\n"));
        assert!(text.contains("Internal Milestones:\n(none)\n"));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = serde_json::from_str::<PlanState>(r#"{"goal": []}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `goal`"));
    }
}
