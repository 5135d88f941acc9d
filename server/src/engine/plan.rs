//! An agent's internal plan: goals, milestones, strategy and notes.
//!
//! The plan is replaced wholesale by a Plan Update in an LLM response (`parse.rs`) or by the
//! `agent_plan_replace` branch op, and rendered into the system prompt on every call. Goal and
//! milestone fields are optional so a plan set by a branch op round-trips verbatim; missing ones
//! print as upstream prints them.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanState {
    #[serde(default)]
    pub goals: Vec<Goal>,
    #[serde(default)]
    pub milestones: Vec<Milestone>,
    #[serde(default)]
    pub strategy: String,
    #[serde(default)]
    pub notes: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl Goal {
    pub fn new(id: impl Into<String>, desc: impl Into<String>, status: &str) -> Self {
        Goal {
            id: Some(id.into()),
            desc: Some(desc.into()),
            priority: Some("normal".into()),
            status: Some(status.into()),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Milestone {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl Milestone {
    pub fn new(id: impl Into<String>, desc: impl Into<String>, status: &str) -> Self {
        Milestone {
            id: Some(id.into()),
            desc: Some(desc.into()),
            status: Some(status.into()),
        }
    }
}

impl PlanState {
    /// The plan block of the system prompt.
    pub fn render(&self) -> String {
        let or = |v: &Option<String>, d: &str| v.clone().unwrap_or_else(|| d.to_string());
        let mut out = String::from("Internal Plan State:\nInternal Goals:\n");
        if self.goals.is_empty() {
            out.push_str("(none)\n");
        }
        for g in &self.goals {
            out.push_str(&format!(
                "- [{}] {} (priority: {}, status: {})\n",
                or(&g.id, "?"),
                or(&g.desc, ""),
                or(&g.priority, ""),
                or(&g.status, "pending")
            ));
        }
        out.push_str("Internal Milestones:\n");
        if self.milestones.is_empty() {
            out.push_str("(none)\n");
        }
        for m in &self.milestones {
            out.push_str(&format!(
                "- [{}] {} (status: {})\n",
                or(&m.id, "?"),
                or(&m.desc, ""),
                or(&m.status, "pending")
            ));
        }
        out.push_str(&format!(
            "Internal Strategy:\n{}\nInternal Notes:\n{}\n",
            self.strategy, self.notes
        ));
        out
    }
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
        let text = plan.render();
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
