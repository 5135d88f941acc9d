//! A tree written out whole ([`TreeExport`], one [`NodeExport`] per node): the export format and
//! the [`SimTree`] methods that make it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::{Annotation, Ask, EdgeType, Op};

use super::*;
use crate::llm::record::LlmRecord;
use crate::sim::Sim;

impl SimTree {
    /// A lossless JSON snapshot of the whole tree (logs, ops, simulator states).
    pub fn export(&mut self) -> Result<TreeExport, TreeError> {
        self.check_exportable()?;
        let nodes = self.ids().into_iter().map(|id| self.export_node(id)).collect::<Result<_, TreeError>>()?;
        Ok(TreeExport {
            format: EXPORT_FORMAT.into(),
            scenario: self.scenario.clone(),
            name: None,
            description: None,
            document: self.document.as_deref().cloned(),
            scenario_version: self.scenario_version,
            root: 0,
            seq: self.next_id,
            nodes,
        })
    }

    /// Every node id, ascending (parents before children).
    pub(crate) fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// A tree is exported whole: not while a run is in flight.
    pub(crate) fn check_exportable(&self) -> Result<(), TreeError> {
        match self.running().first() {
            Some(&id) => Err(TreeError::Running(id)),
            None => Ok(()),
        }
    }

    /// One node of an export (streamed node by node by the HTTP layer).
    pub(crate) fn export_node(&mut self, id: NodeId) -> Result<NodeExport, TreeError> {
        let sim = self.sim(id)?;
        // Stored rows are verified as they are read; an entry that still is not JSON fails the
        // export as it is written, never exported as a silent `null`.
        let logs = LogEntries(self.log(id)?.entries());
        let n = self.node(id)?;
        Ok(NodeExport {
            id: n.id,
            parent: n.parent,
            depth: n.depth,
            edge_type: n.edge_type,
            ops: n.ops.clone(),
            status: n.status,
            error: n.error.clone(),
            sim: (*sim).clone(),
            logs,
            records: n.records.clone(),
            annotation: self.notes.get(&id).cloned(),
            asks: self.asks.get(&id).cloned().unwrap_or_default(),
        })
    }
}

pub(crate) const EXPORT_FORMAT: &str = "simtree-export/2";

/// What an export that the server could not finish ends with, before its reason: a control
/// byte no JSON document holds outside a string, so the file can never pass for a whole export,
/// and an import recognises it.
pub(crate) const EXPORT_FAILED: &str = "\u{1}simtree export failed: ";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeExport {
    pub(crate) format: String,
    pub(crate) scenario: String,
    /// The tree's name and description (absent in exports before the notebook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// The document a user brought the scenario as (absent for a library scenario).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) document: Option<Value>,
    /// The version of the saved scenario `scenario` the document is (a tree made from the
    /// library).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scenario_version: Option<u64>,
    pub(crate) root: NodeId,
    pub(crate) seq: NodeId,
    pub(crate) nodes: Vec<NodeExport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeExport {
    pub(crate) id: NodeId,
    pub(crate) parent: Option<NodeId>,
    pub(crate) depth: u32,
    pub(crate) edge_type: EdgeType,
    pub(crate) ops: Vec<Op>,
    pub(crate) status: NodeStatus,
    #[serde(default)]
    pub(crate) error: Option<String>,
    pub(crate) sim: Sim,
    pub(crate) logs: LogEntries,
    /// Recorded LLM calls, so an imported tree can still be replayed offline.
    #[serde(default)]
    pub(crate) records: Vec<LlmRecord>,
    /// What a user wrote on the node (absent when nothing; exports before the notebook lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) annotation: Option<Annotation>,
    /// The questions asked of its agents (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) asks: Vec<Ask>,
}
