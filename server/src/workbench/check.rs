//! A document looked at without making a tree: checked exactly as creating a tree of it would
//! check it (`POST /api/documents/check`), and, for a social document, the prompt each of its
//! roles would send first (`POST /api/documents/preview`). Nothing is stored and no model is
//! called, so the New page can ask on every edit.

use serde_json::Value;
use simtree_shared::{RolePrompt, ScenarioChecked};

use super::calls::call_message;
use super::{Core, DOCUMENT_ID, RequestError, WorkbenchError, dataset_of};
use crate::scenario::UserScenario;
use crate::sim::hooks::{self, HookSourceError};
use crate::sim::{ScenarioEntry, Sim};

service!(
    /// The scenario library: shipped and saved documents, saving, checking and previewing a
    /// document, and writing one from a description.
    Scenarios
);

impl Scenarios<'_> {
    /// `POST /api/documents/check`: the refusal creating a tree of `doc` would give, or what it
    /// would make. An agent-based model is checked by its validator only (building it needs the
    /// Python worker).
    pub(crate) fn check_document(&self, doc: &Value) -> Result<ScenarioChecked, WorkbenchError> {
        let user = read(doc)?;
        if !matches!(user, UserScenario::Abm(_)) {
            let sim = self.instantiate(&user, doc)?;
            self.check_hooks(&sim)?;
        }
        Ok(ScenarioChecked { kind: ScenarioEntry::from(&user).kind(), title: user.title().to_string() })
    }

    /// `POST /api/documents/preview`: for each role (each agent without one), the first prompt
    /// the first agent of that role sends, from the simulator a tree of `doc` would start with.
    pub(crate) fn preview_document(&self, doc: &Value) -> Result<Vec<RolePrompt>, WorkbenchError> {
        let user = read(doc)?;
        let Sim::Social(sim) = self.instantiate(&user, doc)? else {
            return Err(RequestError::NoPrompts.into());
        };
        let mut prompts: Vec<RolePrompt> = Vec::new();
        for (idx, agent) in sim.world().agents.iter().enumerate() {
            let role = agent.role().map(str::to_string);
            if let Some(same) = prompts.iter_mut().find(|p| role.is_some() && p.role == role) {
                same.also.push(agent.name.clone());
                continue;
            }
            prompts.push(RolePrompt {
                role,
                agent: agent.name.clone(),
                also: Vec::new(),
                messages: sim.opening_prompt(idx).iter().map(call_message).collect(),
            });
        }
        Ok(prompts)
    }
}

impl Core {
    /// A custom scene's Python hooks parsed (never run) in the sandboxed worker, which starts now
    /// if need be: a document with hooks is refused where they could not run, or where they
    /// are not Python defining a hook (422 at `scene.config.hooks.source`).
    pub(super) fn check_hooks(&self, sim: &Sim) -> Result<(), WorkbenchError> {
        match sim.hook_source() {
            Some(source) => self.check_hook_source(source),
            None => Ok(()),
        }
    }

    /// [`Core::check_hooks`] for a hook source already taken out of its simulator.
    pub(super) fn check_hook_source(&self, source: &str) -> Result<(), WorkbenchError> {
        let pool = self.abm_pool()?;
        hooks::check_source(&pool, source).map_err(|e| match e {
            HookSourceError::Refused(c) => WorkbenchError::HookRefused(c),
            HookSourceError::Worker(e) => WorkbenchError::HooksUnchecked(e),
        })
    }

    /// The simulator a tree of `doc` would start from (seed as the document says).
    fn instantiate(&self, user: &UserScenario, doc: &Value) -> Result<Sim, WorkbenchError> {
        let market = self.market_for(dataset_of(doc))?;
        ScenarioEntry::from(user).instantiate(None, market.as_ref()).map_err(WorkbenchError::from)
    }
}

/// `doc` read and checked as an inline document of `POST /devui/simtree`.
fn read(doc: &Value) -> Result<UserScenario, WorkbenchError> {
    Ok(UserScenario::from_document(DOCUMENT_ID, doc)?)
}
