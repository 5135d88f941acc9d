//! A tree read back from an export: [`Importer`] checks and rebuilds it node by node,
//! [`read_export`] streams an export's JSON through it, [`SimTree::import`] takes one in memory.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;
use simtree_shared::{Annotation, Ask, EdgeType, Op};

use super::*;
use crate::trading::data::MarketData;

impl SimTree {
    /// Rebuilds a tree from an export held in memory (see [`Importer`], which this uses).
    pub fn import(
        data: TreeExport,
        market: Option<&Arc<MarketData>>,
        limits: &ImportLimits,
    ) -> Result<SimTree, TreeError> {
        let mut importer =
            Importer::new(data.format, data.scenario, data.root, Some(data.seq), limits, market.cloned())?;
        importer.document = data.document;
        importer.scenario_version = data.scenario_version;
        importer.name = data.name;
        importer.description = data.description;
        for n in data.nodes {
            importer.add(n)?;
        }
        importer.finish(None)
    }
}

/// Rebuilds a tree from an export, node by node (a large import streams through it). The export
/// is untrusted (a file from anywhere): its structure is checked (one root 0, ids unique and
/// below `seq`, parents listed before their children — hence acyclic — and depths and edge types
/// consistent), every op and simulator is checked against the server's limits, and each simulator
/// is viewed once so that a state no run could have produced is refused here rather than failing
/// later. Nothing is registered unless all of it passes. `market` is re-attached to trading
/// episodes (it is not exported). With a store, each accepted node is handed to `on_node` and
/// its simulator and log leave memory (they are read back on demand).
pub struct Importer {
    scenario: String,
    seq: Option<NodeId>,
    limits: ImportLimits,
    market: Option<Arc<MarketData>>,
    nodes: BTreeMap<NodeId, Node>,
    count: usize,
    /// The export's sweeps and explorations as it holds them (after `nodes`; absent in older
    /// exports); the workbench checks them.
    pub(crate) sweeps: Vec<Value>,
    pub(crate) explores: Vec<Value>,
    /// The document the tree was made from, if the export carries one (the workbench checks it).
    pub(crate) document: Option<Value>,
    /// The saved scenario's version the document is, if the export says (`scenario` is its id).
    pub(crate) scenario_version: Option<u64>,
    /// The export's node annotations and asks, checked as they arrive.
    pub(crate) notes: BTreeMap<NodeId, Annotation>,
    pub(crate) asks: BTreeMap<NodeId, Vec<Ask>>,
    /// The export's tree name and description (unchecked: the workbench checks them).
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    /// The export's statement of provenance as it was written: never trusted or stored, only
    /// compared with what the importing server states (`Core::provenance_check`).
    pub(crate) statement: Option<Value>,
}

/// The fields of an export about the tree as a whole, which may come before or after its nodes.
#[derive(Default)]
struct Head {
    document: Option<Value>,
    scenario_version: Option<u64>,
    statement: Option<Value>,
    name: Option<String>,
    description: Option<String>,
}

impl Head {
    /// Moves the fields read so far into `imp`, each replacing what `imp` had.
    fn move_into(&mut self, imp: &mut Importer) {
        imp.document = self.document.take().or(imp.document.take());
        imp.scenario_version = self.scenario_version.take().or(imp.scenario_version);
        imp.statement = self.statement.take().or(imp.statement.take());
        imp.name = self.name.take().or(imp.name.take());
        imp.description = self.description.take().or(imp.description.take());
    }
}

/// Sweeps (and explorations) an export may carry at most.
pub(crate) const MAX_EXPORT_SWEEPS: usize = 1000;

impl Importer {
    pub(crate) fn new(
        format: String,
        scenario: String,
        root: NodeId,
        seq: Option<NodeId>,
        limits: &ImportLimits,
        market: Option<Arc<MarketData>>,
    ) -> Result<Importer, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        if format != EXPORT_FORMAT {
            return Err(bad(format!("unsupported export format '{format}' (expected {EXPORT_FORMAT})")));
        }
        if root != 0 {
            return Err(bad(format!("root must be node 0, not {root}")));
        }
        if let Some(seq) = seq
            && seq > MAX_NODE_ID + 1
        {
            return Err(bad(format!("seq {seq} is beyond the largest node id ({MAX_NODE_ID})")));
        }
        Ok(Importer {
            scenario,
            seq,
            limits: *limits,
            market,
            nodes: BTreeMap::new(),
            count: 0,
            sweeps: Vec::new(),
            explores: Vec::new(),
            document: None,
            scenario_version: None,
            notes: BTreeMap::new(),
            asks: BTreeMap::new(),
            name: None,
            description: None,
            statement: None,
        })
    }

    /// The scenario the export names.
    pub(crate) fn scenario(&self) -> &str {
        &self.scenario
    }

    /// The export's `seq`, when it came after the nodes (checked in [`Self::finish`]).
    fn set_seq(&mut self, seq: NodeId) {
        self.seq = Some(seq);
    }

    /// Checks one node and attaches it; returns it (with its simulator) for the store.
    pub(crate) fn add(&mut self, n: NodeExport) -> Result<&Node, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        let i = self.count;
        let id = n.id;
        let at = |m: String| bad(format!("nodes[{i}] (node {id}): {m}"));
        if self.count >= self.limits.max_nodes {
            return Err(bad(format!(
                "the export has more than {} nodes; this server holds at most {} per tree",
                self.limits.max_nodes, self.limits.max_nodes
            )));
        }
        if self.nodes.contains_key(&id) {
            return Err(at("duplicate node id".into()));
        }
        if let Some(seq) = self.seq
            && id >= seq
        {
            return Err(at(format!("id is not below seq {seq}")));
        }
        if id > MAX_NODE_ID {
            return Err(at(format!("id is beyond the largest node id ({MAX_NODE_ID})")));
        }
        match (i, n.parent) {
            (0, None) if id == 0 => {}
            (0, _) => return Err(at("the first node must be the root: id 0, no parent".into())),
            (_, None) => return Err(at("only the root may have no parent".into())),
            (_, Some(p)) if !self.nodes.contains_key(&p) => {
                return Err(at(format!("parent {p} is not listed before it")));
            }
            _ => {}
        }
        let expected_depth = n.parent.map_or(0, |p| self.nodes[&p].depth + 1);
        if n.depth != expected_depth {
            return Err(at(format!("depth {} but its parent implies {expected_depth}", n.depth)));
        }
        let expected_edge = if n.parent.is_none() { EdgeType::Root } else { Op::edge_type_of(&n.ops) };
        // A sweep's (an exploration's) cells and replicates keep their ops but say `sweep`
        // (`explore`).
        let sweep =
            matches!(n.edge_type, EdgeType::Sweep | EdgeType::Explore) && n.parent.is_some() && !n.ops.is_empty();
        if n.edge_type != expected_edge && !sweep {
            return Err(at(format!("edge type {:?} does not match its ops ({expected_edge:?})", n.edge_type)));
        }
        for op in &n.ops {
            if let Op::Advance { turns } = op
                && *turns > self.limits.max_turns
            {
                return Err(at(format!(
                    "an advance of {turns} turns is beyond this server's {} per request",
                    self.limits.max_turns
                )));
            }
        }
        let mut sim = n.sim;
        sim.attach(self.market.as_ref());
        sim.distrust();
        sim.check_imported().map_err(|e| at(e.to_string()))?;
        let viewable = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = (sim.view(), sim.state(), sim.turns());
        }));
        if viewable.is_err() {
            return Err(at("the simulator state is inconsistent".into()));
        }
        if let Some(p) = n.parent
            && let Some(parent) = self.nodes.get_mut(&p)
        {
            parent.children.push(id);
        }
        // Objects, checked as they were read (`log_entries`).
        let entries: Vec<String> = n.logs.0;
        let now = crate::store::now_ms();
        self.count += 1;
        let node = Node {
            id,
            parent: n.parent,
            depth: n.depth,
            edge_type: n.edge_type,
            ops: {
                let mut ops = n.ops;
                ops.shrink_to_fit();
                ops
            },
            children: Vec::new(),
            turns: sim.turns(),
            created: now,
            finished: Some(now),
            cost: 0,
            used: 0,
            sim: Some(Arc::new(sim)),
            log: Arc::new(NodeLog::from_entries(entries.iter().map(String::as_str))),
            // A run that was in flight when the tree was exported did not finish.
            status: if n.status == NodeStatus::Running { NodeStatus::Interrupted } else { n.status },
            error: n.error,
            records: n.records,
        };
        if let Some(a) = &n.annotation
            && let Some(a) = notebook::checked(a).map_err(|e| at(format!("annotation: {e}")))?
        {
            self.notes.insert(id, a);
        }
        if !n.asks.is_empty() {
            notebook::check_asks(&n.asks).map_err(|e| at(format!("asks: {e}")))?;
            self.asks.insert(id, n.asks);
        }
        Ok(self.nodes.entry(id).or_insert(node))
    }

    /// Drops a stored node's simulator and log from memory (they are in the store now).
    pub(crate) fn release(&mut self, id: NodeId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.sim = None;
            n.log = Arc::new(NodeLog::unloaded());
        }
    }

    /// The tree, once every node is in. `seq` is the export's when it came after the nodes.
    pub(crate) fn finish(mut self, source: Option<crate::store::TreeSource>) -> Result<SimTree, TreeError> {
        let bad = |m: String| TreeError::InvalidOp(m);
        if !self.nodes.contains_key(&0) {
            return Err(bad("the export has no root node 0".into()));
        }
        let max_id = self.nodes.keys().next_back().copied().unwrap_or(0);
        let seq = self.seq.get_or_insert(max_id + 1);
        if *seq > MAX_NODE_ID + 1 {
            return Err(bad(format!("seq {seq} is beyond the largest node id ({MAX_NODE_ID})")));
        }
        if max_id >= *seq {
            return Err(bad(format!("node {max_id} is not below seq {seq}")));
        }
        Ok(SimTree {
            scenario: self.scenario,
            document: self.document.map(Arc::new),
            scenario_version: self.scenario_version,
            nodes: self.nodes,
            next_id: *seq,
            source,
            notes: self.notes,
            asks: self.asks,
        })
    }
}

/// Reads an export from `reader` node by node, handing each to `on_node` (which checks and keeps
/// it with [`Importer::add`]): memory holds one node's JSON at a time, whatever the export's
/// size. The header fields (`format`, `scenario`, `root`) must come before `nodes`, as exports
/// write them; `seq` may come before or after.
pub(crate) fn read_export<R: std::io::Read>(
    reader: R,
    limits: &ImportLimits,
    market: Option<Arc<MarketData>>,
    on_node: impl FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>,
) -> Result<Importer, TreeError> {
    use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

    struct State<'a, F> {
        limits: &'a ImportLimits,
        market: Option<Arc<MarketData>>,
        on_node: F,
        failure: Option<TreeError>,
        /// What the part being read will cost decoded (see [`Metered`]); zeroed after each node.
        part: Rc<Cell<u64>>,
    }
    struct Top<'s, 'a, F>(&'s mut State<'a, F>);
    struct Nodes<'s, 'a, F>(&'s mut State<'a, F>, &'s mut Importer);

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> Visitor<'de> for Top<'_, '_, F> {
        type Value = Option<Importer>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a simtree export object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut format, mut scenario, mut root, mut seq) = (None, None, None, None);
            let mut importer: Option<Importer> = None;
            let mut head = Head::default();
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "scenario_version" => head.scenario_version = Some(map.next_value()?),
                    "format" => format = Some(map.next_value::<String>()?),
                    "document" => head.document = Some(map.next_value()?),
                    "scenario" => scenario = Some(map.next_value::<String>()?),
                    // The exporting server's statement of origin: kept aside to be compared,
                    // never used to build the tree.
                    "provenance" => head.statement = Some(map.next_value()?),
                    "name" => head.name = Some(map.next_value()?),
                    "description" => head.description = Some(map.next_value()?),
                    "root" => root = Some(map.next_value::<NodeId>()?),
                    "seq" => {
                        let s = map.next_value::<NodeId>()?;
                        if let Some(imp) = &mut importer {
                            imp.set_seq(s);
                        }
                        seq = Some(s);
                    }
                    "nodes" => {
                        if importer.is_some() {
                            return Err(A::Error::custom("duplicate field `nodes`"));
                        }
                        let (Some(format), Some(scenario), Some(root)) = (format.take(), scenario.take(), root) else {
                            return Err(A::Error::custom("`format`, `scenario` and `root` must come before `nodes`"));
                        };
                        let mut imp =
                            match Importer::new(format, scenario, root, seq, self.0.limits, self.0.market.clone()) {
                                Ok(i) => i,
                                Err(e) => {
                                    self.0.failure = Some(e);
                                    return Err(A::Error::custom("refused"));
                                }
                            };
                        head.move_into(&mut imp);
                        map.next_value_seed(Nodes(self.0, &mut imp))?;
                        importer = Some(imp);
                    }
                    "sweeps" => {
                        let Some(imp) = &mut importer else {
                            return Err(A::Error::custom("`sweeps` must come after `nodes`"));
                        };
                        imp.sweeps = map.next_value_seed(Jobs("sweeps"))?;
                    }
                    "explores" => {
                        let Some(imp) = &mut importer else {
                            return Err(A::Error::custom("`explores` must come after `nodes`"));
                        };
                        imp.explores = map.next_value_seed(Jobs("explores"))?;
                    }
                    other => {
                        return Err(A::Error::unknown_field(
                            other,
                            &[
                                "format",
                                "scenario",
                                "name",
                                "description",
                                "document",
                                "scenario_version",
                                "provenance",
                                "root",
                                "seq",
                                "nodes",
                                "sweeps",
                                "explores",
                            ],
                        ));
                    }
                }
            }
            // What came after the nodes.
            if let Some(imp) = &mut importer {
                head.move_into(imp);
            }
            Ok(importer)
        }
    }

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> DeserializeSeed<'de> for Nodes<'_, '_, F> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de, F: FnMut(&mut Importer, NodeExport) -> Result<(), TreeError>> Visitor<'de> for Nodes<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of nodes")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0usize;
            loop {
                let node = match seq.next_element::<NodeExport>() {
                    Ok(Some(n)) => n,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(A::Error::custom(format!("nodes[{i}]: {e}"))),
                };
                if let Err(e) = (self.0.on_node)(self.1, node) {
                    self.0.failure = Some(e);
                    return Err(A::Error::custom("refused"));
                }
                self.0.part.set(0);
                i += 1;
            }
        }
    }

    /// The `sweeps` or `explores` list (named by the field), refused past [`MAX_EXPORT_SWEEPS`]
    /// entries as it is read.
    struct Jobs(&'static str);

    impl<'de> DeserializeSeed<'de> for Jobs {
        type Value = Vec<Value>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Value>, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Jobs {
        type Value = Vec<Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of {}", self.0)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<Value>()? {
                if out.len() == MAX_EXPORT_SWEEPS {
                    return Err(A::Error::custom(format!("more than {MAX_EXPORT_SWEEPS} {}", self.0)));
                }
                out.push(s);
            }
            Ok(out)
        }
    }

    let part = Rc::new(Cell::new(0));
    let metered =
        Metered { inner: reader, part: part.clone(), limit: limits.max_part_bytes(), in_string: false, escaped: false };
    let mut state = State { limits, market, on_node, failure: None, part };
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, metered));
    let (parsed, too_large) = log_entries::with_budget(limits.max_memory, || {
        (&mut de).deserialize_map(Top(&mut state)).and_then(|imp| de.end().map(|()| imp))
    });
    match (parsed, state.failure) {
        (_, Some(e)) => Err(e),
        (Ok(Some(imp)), None) => Ok(imp),
        (Ok(None), None) => Err(TreeError::InvalidOp("invalid export: missing field `nodes`".into())),
        (Err(e), None) if too_large => Err(TreeError::TooLarge(format!("import refused: {e}"))),
        (Err(e), None) => Err(TreeError::InvalidOp(format!("invalid export: {e}"))),
    }
}

/// What one decoded value may cost at most, beyond its text: `serde_json` gives every value at
/// least a 32-byte slot, and maps and growing lists add to it.
const VALUE_COST: u64 = 48;

/// An export's bytes on their way to the parser, with what they will cost once decoded counted
/// per part (the fields before the first node, then each node in turn). Decoding amplifies: a
/// node state holding a 200 MB list of small numbers takes ~3 GB as values. A part's cost is
/// bounded from above by its bytes plus [`VALUE_COST`] for each value it can hold (one per
/// `,` `:` `[` `{` outside strings); once it passes the limit the read fails, before the parser
/// has built more than the limit's worth.
struct Metered<R> {
    inner: R,
    part: Rc<Cell<u64>>,
    limit: u64,
    in_string: bool,
    escaped: bool,
}

impl<R: std::io::Read> std::io::Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut cost = n as u64;
        for &b in &buf[..n] {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
            } else {
                match b {
                    0x01 => return Err(cut_short(&buf[..n])),
                    b'"' => self.in_string = true,
                    b',' | b':' | b'[' | b'{' => cost += VALUE_COST,
                    _ => {}
                }
            }
        }
        let part = self.part.get().saturating_add(cost);
        self.part.set(part);
        if part > self.limit {
            log_entries::mark_too_large();
            return Err(std::io::Error::other(format!(
                "one node would take more than {} MiB of memory once decoded (an eighth of \
                 --max-memory-mb, or 512 MiB without a budget)",
                self.limit >> 20
            )));
        }
        Ok(n)
    }
}

/// The error for an export that its server could not finish (see [`EXPORT_FAILED`]), with the
/// reason it wrote when this read holds it.
fn cut_short(read: &[u8]) -> std::io::Error {
    let text = String::from_utf8_lossy(read);
    let reason = text
        .split_once(EXPORT_FAILED)
        .map(|(_, r)| r.lines().next().unwrap_or_default().chars().take(300).collect::<String>());
    std::io::Error::other(match reason {
        Some(r) => format!("the export is incomplete: the server that wrote it could not finish it ({r})"),
        None => "the export is incomplete: the server that wrote it could not finish it".to_string(),
    })
}

/// What an imported tree may claim: the importing server's own limits.
#[derive(Clone, Copy, Debug)]
pub struct ImportLimits {
    pub(crate) max_nodes: usize,
    pub(crate) max_turns: u64,
    /// The server's memory budget in bytes (`--max-memory-mb`; 0: none), consulted while a
    /// node's log is read.
    pub(crate) max_memory: u64,
}

impl ImportLimits {
    /// What one node (or the fields before the first) may cost decoded: an eighth of the
    /// memory budget, at least 16 MiB; 512 MiB without a budget.
    pub(crate) fn max_part_bytes(&self) -> u64 {
        match self.max_memory {
            0 => 512 << 20,
            budget => (budget / 8).max(16 << 20),
        }
    }
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits { max_nodes: 100_000, max_turns: 1000, max_memory: 0 }
    }
}
