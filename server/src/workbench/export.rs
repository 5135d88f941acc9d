//! A tree's export, read a node at a time: the header (format, scenario, name, document,
//! provenance) and the node ids are taken at once, each node is read when the writer reaches it
//! (from the store if it is not in memory, under the tree's lock for that node only), and the
//! sweeps and explorations close it. `http::transfer` streams it; nothing here holds the whole
//! document.

use std::sync::Arc;

use serde_json::Value;

use super::{SweepData, Transfer, TreeHandle, WorkbenchError};
use crate::tree::{EXPORT_FORMAT, NodeExport, NodeId, TreeError};

/// An export under way ([`Transfer::export`]).
pub struct Export {
    /// The document's fields before its nodes.
    pub(crate) header: Value,
    /// The nodes to write, in order; those deleted meanwhile are skipped.
    pub ids: Vec<NodeId>,
    pub(crate) sweeps: Vec<SweepData>,
    pub(crate) explores: Vec<super::explore::ExploreData>,
    handle: Arc<TreeHandle>,
}

impl Export {
    /// One node as exported; `NodeNotFound` once it was deleted during the export.
    pub fn node(&self, id: NodeId) -> Result<NodeExport, TreeError> {
        self.handle.lock().export_node(id)
    }
}

impl Transfer<'_> {
    /// Starts an export of `tree`. Refused while a run is in flight.
    pub fn export(&self, tree: u64) -> Result<Export, WorkbenchError> {
        let handle = self.tree(tree)?;
        let sweeps = self.sweep_data(tree)?;
        let explores = self.explore_data(tree)?;
        let info = handle.info();
        let provenance = self.provenance(tree, 0)?;
        let (ids, header) = {
            let t = handle.lock();
            t.check_exportable()?;
            let mut header = serde_json::json!({
                "format": EXPORT_FORMAT,
                "scenario": t.scenario,
                "name": info.name,
                "root": 0,
                "seq": t.seq(),
            });
            if let Some(d) = &info.description {
                header["description"] = d.clone().into();
            }
            if let Some(doc) = &t.document {
                header["document"] = (**doc).clone();
            }
            if let Some(version) = t.scenario_version {
                header["scenario_version"] = version.into();
            }
            // Where it came from, as the exporting server saw it (an import does not trust it).
            header["provenance"] = serde_json::to_value(&provenance).unwrap_or_default();
            (t.ids(), header)
        };
        Ok(Export { header, ids, sweeps, explores, handle })
    }
}
