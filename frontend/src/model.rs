//! Pure UI state and the reducers that apply server messages to it (no DOM, tested natively).
//!
//! * [`GraphModel`] — the tree as the UI draws it, kept in sync by the tree socket's messages
//!   (`attached`, `run_start`, `run_finish`, `deleted`, `snapshot`) as upstream's reducer does
//!   (spec §4.2), plus the extension messages.
//! * [`Progress`] — how far each running node has got (`run_progress`), kept apart from the
//!   graph so that ten messages a second do not re-lay out the tree.
//! * [`Toasts`] — the notification list: finished runs coalesce into one toast per batch,
//!   failures are errors that stay until dismissed.
//! * [`NodeView`] — the selected node's events and per-agent context, fed by REST and then by the
//!   node socket, applying `agent_ctx_delta` with the tail-growth rule (spec §4.4) so the live
//!   view equals the server's merged memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use simtree_shared::abm::AbmStep;
use simtree_shared::trading::{DecisionBrief, DecisionEvent};
use simtree_shared::{
    ActionEnd, AgentErrorEvent, Broadcast, CtxDelta, EdgeType, EventType, Graph, GraphEdge, LandlordDeal, LogEntry,
    NodeState, NodeStatus, Op, SceneEventClass, Summary, TreeMsg,
};

/// The tree as drawn: nodes with depth, edges with type, running ids, each node's status, the
/// ops that made it and the reason of a failed run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphModel {
    pub root: u64,
    pub nodes: BTreeMap<u64, u32>,
    pub edges: Vec<GraphEdge>,
    pub running: BTreeSet<u64>,
    /// Nodes whose status is not `done` (absent = done).
    pub status: HashMap<u64, NodeStatus>,
    /// The ops on the edge into each node (from summaries and `attached`).
    pub ops: HashMap<u64, Vec<Op>>,
    /// Why a run failed, when the tree socket said so.
    pub errors: HashMap<u64, String>,
    /// The tree's kind: the unit its advances are labelled in (turns, decisions, steps).
    pub kind: crate::ops::Kind,
    /// Turns (decisions, steps) each node has run counted from the root, from the summaries and
    /// `run_finish`; and the advances that ran fewer than they asked for (an episode or a game
    /// that ended, a run stopped), with what they ran — their labels say it.
    pub turns: HashMap<u64, u64>,
    pub ran: HashMap<u64, u64>,
}

/// A run that ended, for the notifications.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunEnd {
    pub node: u64,
    pub status: NodeStatus,
    pub error: Option<String>,
}

impl GraphModel {
    pub fn from_graph(g: &Graph) -> Self {
        let mut status: HashMap<u64, NodeStatus> =
            g.nodes.iter().filter(|n| n.status != NodeStatus::Done).map(|n| (n.id, n.status)).collect();
        for r in &g.running {
            status.insert(*r, NodeStatus::Running);
        }
        GraphModel {
            root: g.root,
            nodes: g.nodes.iter().map(|n| (n.id, n.depth)).collect(),
            edges: g.edges.clone(),
            running: g.running.iter().copied().collect(),
            status,
            ops: HashMap::new(),
            errors: HashMap::new(),
            kind: Default::default(),
            turns: HashMap::new(),
            ran: HashMap::new(),
        }
    }

    /// Takes the ops of every edge and each node's turns from `GET …/summaries` (the graph route
    /// has neither).
    pub fn set_ops(&mut self, summaries: &[Summary]) {
        for s in summaries {
            self.turns.insert(s.id, s.turns);
            for e in &s.edges {
                self.ops.insert(e.to, e.ops.clone());
            }
        }
        for s in summaries {
            for e in &s.edges {
                self.measure_run(e.to, s.id);
            }
        }
    }

    /// Notes whether `node`'s advance ran fewer turns than it asked for (known once it and its
    /// parent have their turns, and it no longer runs).
    fn measure_run(&mut self, node: u64, parent: u64) {
        let asked = match self.ops.get(&node).map(Vec::as_slice) {
            Some([Op::Advance { turns }]) => *turns,
            _ => return,
        };
        let (Some(&before), Some(&now)) = (self.turns.get(&parent), self.turns.get(&node)) else {
            return;
        };
        let ran = now.saturating_sub(before);
        if ran < asked && !self.running.contains(&node) {
            self.ran.insert(node, ran);
        } else {
            self.ran.remove(&node);
        }
    }

    /// What made `node`, in a few words: its ops, and for an advance that ran fewer turns than
    /// it asked for, both numbers ("+120 of 200 decisions").
    pub fn made_label(&self, node: u64, lang: crate::i18n::Lang) -> Option<String> {
        let ops = self.ops.get(&node)?;
        Some(match (ops.as_slice(), self.ran.get(&node)) {
            ([Op::Advance { turns }], Some(&ran)) => crate::ops::short_advance_label(ran, *turns, lang, self.kind),
            _ => crate::ops::ops_label(ops, lang, self.kind),
        })
    }

    /// A fingerprint of the tree's shape — its root, nodes with their depths, and typed edges —
    /// and of nothing else: what the layout depends on. Ops, statuses and failure reasons arrive
    /// apart from the shape (the ops after the graph, statuses with every run), and must not make
    /// the UI lay out thousands of nodes again.
    pub fn shape_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.root.hash(&mut h);
        self.nodes.hash(&mut h);
        for e in &self.edges {
            (e.from, e.to, e.kind).hash(&mut h);
        }
        h.finish()
    }

    pub fn status_of(&self, node: u64) -> NodeStatus {
        self.status.get(&node).copied().unwrap_or_default()
    }

    /// Applies one tree-socket message; returns the end of a run (for a notification).
    pub fn apply(&mut self, msg: &TreeMsg) -> Option<RunEnd> {
        match msg {
            TreeMsg::Attached(a) => {
                self.nodes.entry(a.node).or_insert(a.depth);
                self.ops.insert(a.node, a.ops.clone());
                if let Some(parent) = a.parent
                    && !self.edges.iter().any(|e| e.to == a.node)
                {
                    self.edges.push(GraphEdge { from: parent, to: a.node, kind: a.edge_type });
                }
                None
            }
            TreeMsg::RunStart { node } => {
                self.running.insert(*node);
                self.status.insert(*node, NodeStatus::Running);
                None
            }
            TreeMsg::RunFinish { node, status, error, turns } => {
                self.running.remove(node);
                if let Some(t) = turns {
                    self.turns.insert(*node, *t);
                    if let Some(parent) = self.parent_of(*node) {
                        self.measure_run(*node, parent);
                    }
                }
                // A run that ends is never `running`; an old server sends no status (= done).
                let status = if status.is_running() { NodeStatus::Done } else { *status };
                if status == NodeStatus::Done {
                    self.status.remove(node);
                } else {
                    self.status.insert(*node, status);
                }
                if let Some(e) = error {
                    self.errors.insert(*node, e.clone());
                }
                Some(RunEnd { node: *node, status, error: error.clone() })
            }
            TreeMsg::Deleted { node } => {
                let gone = self.descendants(*node);
                self.nodes.retain(|id, _| !gone.contains(id));
                self.edges.retain(|e| !gone.contains(&e.to) && !gone.contains(&e.from));
                self.running.retain(|id| !gone.contains(id));
                self.status.retain(|id, _| !gone.contains(id));
                None
            }
            TreeMsg::Snapshot(g) => {
                // The snapshot has no ops or reasons: keep what we know of the nodes it still has.
                let ops = std::mem::take(&mut self.ops);
                let errors = std::mem::take(&mut self.errors);
                let (turns, ran) = (std::mem::take(&mut self.turns), std::mem::take(&mut self.ran));
                // Nor the tree's kind (the unit of its advances' labels).
                let kind = self.kind;
                *self = GraphModel::from_graph(g);
                self.kind = kind;
                self.ops = ops.into_iter().filter(|(n, _)| self.nodes.contains_key(n)).collect();
                self.errors = errors.into_iter().filter(|(n, _)| self.nodes.contains_key(n)).collect();
                self.turns = turns.into_iter().filter(|(n, _)| self.nodes.contains_key(n)).collect();
                self.ran = ran.into_iter().filter(|(n, _)| self.nodes.contains_key(n)).collect();
                None
            }
            // Progress lives in [`Progress`] (sweeps in their table); a resync is followed by a snapshot.
            TreeMsg::RunProgress { .. }
            | TreeMsg::SweepProgress { .. }
            | TreeMsg::ExploreProgress { .. }
            | TreeMsg::Resync { .. }
            | TreeMsg::Delta { .. }
            | TreeMsg::Marks { .. }
            | TreeMsg::TreeEdited { .. } => None,
        }
    }

    /// `node` and everything below it, from the current edges.
    pub fn descendants(&self, node: u64) -> BTreeSet<u64> {
        let children = self.children();
        let mut out = BTreeSet::new();
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if out.insert(n) {
                stack.extend(children.get(&n).into_iter().flatten().copied());
            }
        }
        out
    }

    /// Child lists in edge order.
    pub fn children(&self) -> HashMap<u64, Vec<u64>> {
        let mut map: HashMap<u64, Vec<u64>> = HashMap::new();
        for e in &self.edges {
            map.entry(e.from).or_default().push(e.to);
        }
        map
    }

    pub fn parent_of(&self, node: u64) -> Option<u64> {
        self.edges.iter().find(|e| e.to == node).map(|e| e.from)
    }

    /// The root path of `node`, root first (a cycle, which a tree cannot have, ends it).
    pub fn path_to(&self, node: u64) -> Vec<u64> {
        let mut path = vec![node];
        while let Some(p) = path.last().and_then(|&n| self.parent_of(n)) {
            if path.contains(&p) {
                break;
            }
            path.push(p);
        }
        path.reverse();
        path
    }

    pub fn is_leaf(&self, node: u64) -> bool {
        !self.edges.iter().any(|e| e.from == node)
    }

    pub fn edge_type_of(&self, node: u64) -> Option<EdgeType> {
        self.edges.iter().find(|e| e.to == node).map(|e| e.kind)
    }
}

/// A fan-out in flight (a parallel run from one node, or a run of every leaf): the parents it
/// started from and the nodes there were before it. Its children are the nodes attached under
/// one of those parents since; "Stop all" cancels those still running.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FanOut {
    parents: BTreeSet<u64>,
    before: BTreeSet<u64>,
}

impl FanOut {
    /// A fan-out from `parents`, started when the graph was `g`.
    pub fn start(g: &GraphModel, parents: impl IntoIterator<Item = u64>) -> Self {
        FanOut { parents: parents.into_iter().collect(), before: g.nodes.keys().copied().collect() }
    }

    /// A run of every leaf of `g` (`advance_frontier`).
    pub fn of_leaves(g: &GraphModel) -> Self {
        let inner: BTreeSet<u64> = g.edges.iter().map(|e| e.from).collect();
        Self::start(g, g.nodes.keys().copied().filter(|n| !inner.contains(n)))
    }

    /// The fan-out's children that still run, in id order.
    pub fn running(&self, g: &GraphModel) -> Vec<u64> {
        let mut out: Vec<u64> = g
            .edges
            .iter()
            .filter(|e| self.parents.contains(&e.from) && !self.before.contains(&e.to))
            .map(|e| e.to)
            .filter(|n| g.status_of(*n) == NodeStatus::Running)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl GraphModel {
    /// The children of `node` that run now (a fan-out seen from its parent).
    pub fn running_children(&self, node: u64) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .edges
            .iter()
            .filter(|e| e.from == node && self.status_of(e.to) == NodeStatus::Running)
            .map(|e| e.to)
            .collect();
        out.sort_unstable();
        out
    }
}

/// `done` of `total` units of a run: turns (social), steps (ABM) or decision points (trading).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turns {
    pub done: u64,
    pub total: u64,
}

impl Turns {
    /// The finished share in `0.0..=1.0` (an unknown total counts as nothing done).
    pub fn fraction(self) -> f64 {
        if self.total == 0 { 0.0 } else { (self.done as f64 / self.total as f64).clamp(0.0, 1.0) }
    }
}

/// The latest `run_progress` of every running node.
///
/// Applied after [`GraphModel::apply`] with the updated graph: an entry lives only while the
/// graph says its node runs, so a finish, a delete or a snapshot without the node drops it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress(pub HashMap<u64, Turns>);

impl Progress {
    /// Applies one tree-socket message; true when what is shown changed.
    pub fn apply(&mut self, msg: &TreeMsg, graph: &GraphModel) -> bool {
        match msg {
            TreeMsg::RunProgress { node, done, total } => {
                let t = Turns { done: *done, total: *total };
                self.0.insert(*node, t) != Some(t)
            }
            TreeMsg::RunFinish { .. } | TreeMsg::Deleted { .. } | TreeMsg::Snapshot(_) => {
                let before = self.0.len();
                self.0.retain(|n, _| graph.running.contains(n));
                self.0.len() != before
            }
            TreeMsg::Attached(_)
            | TreeMsg::RunStart { .. }
            | TreeMsg::SweepProgress { .. }
            | TreeMsg::ExploreProgress { .. }
            | TreeMsg::Resync { .. }
            | TreeMsg::Delta { .. }
            | TreeMsg::Marks { .. }
            | TreeMsg::TreeEdited { .. } => false,
        }
    }

    pub fn of(&self, node: u64) -> Option<Turns> {
        self.0.get(&node).copied()
    }
}

/// How bad a notification is: errors look different and stay until dismissed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Error,
}

/// What a notification says (rendered in the current language by the shell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// Runs that finished in one batch.
    Finished(Vec<u64>),
    /// A run that failed, with the reason.
    Failed { node: u64, reason: String },
    /// Runs stopped by a client.
    Cancelled(Vec<u64>),
    /// Any other message (request errors, confirmations).
    Text(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToastItem {
    pub id: u64,
    pub level: Level,
    pub note: Note,
    /// How many identical messages this toast stands for.
    pub count: usize,
    /// Bumped on every merge, so an expiry timer started earlier leaves a renewed toast alone.
    pub touched: u64,
}

/// The notification list. Finished runs of one batch merge into one toast, repeated errors into
/// one with a count, and at most [`Toasts::MAX`] are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Toasts {
    pub items: Vec<ToastItem>,
    next: u64,
}

impl Toasts {
    pub const MAX: usize = 3;

    /// Adds a notification (or merges it into a matching one); returns `(id, touched)` for the
    /// expiry timer.
    pub fn push(&mut self, level: Level, note: Note) -> (u64, u64) {
        self.next += 1;
        let stamp = self.next;
        let merged = self.items.iter_mut().rev().find_map(|t| {
            // A list of runs grows by the new ones (its length is their number: no "×n" on top);
            // any other repeat counts up.
            let (same, repeat) = match (&mut t.note, &note) {
                (Note::Finished(a), Note::Finished(b)) | (Note::Cancelled(a), Note::Cancelled(b)) => {
                    a.extend(b.iter().filter(|n| !a.contains(n)).copied().collect::<Vec<_>>());
                    a.sort_unstable();
                    (true, false)
                }
                (a, b) => (a == b, true),
            };
            same.then(|| {
                if repeat {
                    t.count += 1;
                }
                t.touched = stamp;
                t.id
            })
        });
        if let Some(id) = merged {
            return (id, stamp);
        }
        self.items.push(ToastItem { id: stamp, level, note, count: 1, touched: stamp });
        // Drop the oldest info first; errors are worth more than a "finished".
        while self.items.len() > Self::MAX {
            let i = self.items.iter().position(|t| t.level == Level::Info).unwrap_or(0);
            self.items.remove(i);
        }
        (stamp, stamp)
    }

    /// A run's end as a notification.
    pub fn run_end(&mut self, end: &RunEnd) -> (u64, u64) {
        match end.status {
            NodeStatus::Failed | NodeStatus::Interrupted => self.push(
                Level::Error,
                Note::Failed { node: end.node, reason: end.error.clone().unwrap_or_else(|| "no reason given".into()) },
            ),
            NodeStatus::Cancelled => self.push(Level::Info, Note::Cancelled(vec![end.node])),
            _ => self.push(Level::Info, Note::Finished(vec![end.node])),
        }
    }

    /// The expiry timer: removes info toast `id` unless it was renewed after `touched`. Errors
    /// stay until dismissed.
    pub fn expire(&mut self, id: u64, touched: u64) {
        self.items.retain(|t| !(t.id == id && t.touched == touched && t.level == Level::Info));
    }

    /// The close button.
    pub fn dismiss(&mut self, id: u64) {
        self.items.retain(|t| t.id != id);
    }
}

/// One agent's context as shown in the agent panel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentView {
    pub name: String,
    pub role: Option<String>,
    /// The agent's plan (goals, milestones, strategy, notes) as the node's state holds it.
    pub plan: serde_json::Value,
    pub memory: Vec<(String, String)>,
    /// The agent's properties at this node (profile fields, role, what `agent_props_patch` set).
    pub properties: serde_json::Map<String, serde_json::Value>,
}

/// The selected node: its event list and its agents' memories.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    pub node: u64,
    pub turns: u64,
    pub events: Vec<LogEntry>,
    pub agents: Vec<AgentView>,
}

/// A property's value as a line shows it: a string as it is, anything else as compact JSON.
pub fn property_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl NodeView {
    /// The REST truth: `…/events` and `…/state`.
    pub fn from_rest(node: u64, events: Vec<LogEntry>, state: &NodeState) -> Self {
        let agents = state
            .agents
            .iter()
            .map(|a| AgentView {
                name: a.name.clone(),
                role: a.role.clone(),
                plan: a.plan_state.clone(),
                memory: a.short_memory.iter().map(|m| (m.role.clone(), m.content.clone())).collect(),
                properties: a.properties.clone(),
            })
            .collect();
        NodeView { node, turns: state.turns, events, agents }
    }

    /// Applies one node-socket entry: context deltas grow the agent's memory with the tail rule
    /// (same role as the last entry → append `"\n" + content`, else a new entry); everything else
    /// is an event.
    pub fn apply(&mut self, entry: LogEntry) {
        if entry.event_type() != Some(EventType::AgentCtxDelta) {
            self.events.push(entry);
            return;
        }
        let Some(CtxDelta { agent, role, content }) = entry.payload_of() else {
            return;
        };
        let view = match self.agents.iter_mut().position(|a| a.name == agent) {
            Some(i) => &mut self.agents[i],
            None => {
                self.agents.push(AgentView { name: agent.to_string(), ..Default::default() });
                self.agents.last_mut().expect("just pushed")
            }
        };
        match view.memory.last_mut() {
            Some((r, text)) if *r == role => {
                text.push('\n');
                text.push_str(&content);
            }
            _ => view.memory.push((role, content)),
        }
    }
}

/// An agent's plan in a line: its goals (with their status), milestones, strategy and notes,
/// each named by `words` (in the page's language); `None` when it has none of them.
pub fn plan_text(plan: &serde_json::Value, words: [&str; 4]) -> Option<String> {
    let [goals_w, milestones_w, strategy_w, notes_w] = words;
    let p: simtree_shared::PlanState = serde_json::from_value(plan.clone()).ok()?;
    let mut parts = Vec::new();
    let item = |desc: &Option<String>, id: &Option<String>, status: &Option<String>| {
        let what = desc.clone().or_else(|| id.clone()).unwrap_or_default();
        match status {
            Some(s) if !s.is_empty() => format!("{what} [{s}]"),
            _ => what,
        }
    };
    if !p.goals.is_empty() {
        let goals: Vec<String> = p.goals.iter().map(|g| item(&g.desc, &g.id, &g.status)).collect();
        parts.push(format!("{goals_w}: {}", goals.join("; ")));
    }
    if !p.milestones.is_empty() {
        let ms: Vec<String> = p.milestones.iter().map(|m| item(&m.desc, &m.id, &m.status)).collect();
        parts.push(format!("{milestones_w}: {}", ms.join("; ")));
    }
    if !p.strategy.is_empty() {
        parts.push(format!("{strategy_w}: {}", p.strategy));
    }
    if !p.notes.is_empty() {
        parts.push(format!("{notes_w}: {}", p.notes));
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// How an event line is shown (spec §4.3); `None` hides the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLine {
    /// `event`, `message`, `action`, `deal` or `error` (CSS class of the label).
    pub kind: &'static str,
    pub label: String,
    pub agent: Option<String>,
    pub text: String,
}

/// Formats a log entry the way the DevUI's event panel does.
pub fn event_line(e: &LogEntry) -> Option<EventLine> {
    let line =
        |kind: &'static str, label: String, agent: Option<String>, text: String| EventLine { kind, label, agent, text };
    match e.event_type()? {
        EventType::SystemBroadcast => {
            let b: Broadcast = e.payload_of()?;
            (b.class == SceneEventClass::PublicEvent).then(|| line("event", "[Event]".into(), None, b.text))
        }
        EventType::ActionEnd => {
            let end: ActionEnd = e.payload_of()?;
            match end.name() {
                "yield" | "" => None,
                "send_message" => {
                    let text = end.message().unwrap_or("").to_string();
                    Some(line("message", "[Action]".into(), Some(end.agent), text))
                }
                other => {
                    Some(line("action", format!("[Action {other}]"), None, end.summary.clone().unwrap_or_default()))
                }
            }
        }
        EventType::LandlordDeal => {
            let deal: LandlordDeal = e.payload_of().unwrap_or_default();
            Some(line("deal", "[Deal]".into(), None, format!("Bottom: {}", deal.bottom.join(" "))))
        }
        EventType::DecisionPoint => {
            let d: DecisionEvent<DecisionBrief> = e.payload_of()?;
            let log = d.log;
            let text = format!("{}: {} → {}", log.case_id, log.agent_output.text, log.execution_result.message);
            Some(line("action", "[Decision]".into(), None, text))
        }
        EventType::AbmStep => {
            let step: AbmStep = e.payload_of()?;
            let values = step
                .values
                .iter()
                .filter(|(_, v)| v.is_number())
                .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
                .collect::<Vec<_>>()
                .join(" ");
            Some(line("action", format!("[Step {}]", step.step), None, values))
        }
        EventType::AgentError => {
            let err: AgentErrorEvent = e.payload_of()?;
            Some(line("error", "[Error]".into(), Some(err.agent), err.error))
        }
        EventType::Counterfactual => {
            let c: simtree_shared::Counterfactual = e.payload_of()?;
            let ops = crate::ops::ops_label(&c.ops, crate::i18n::Lang::En, crate::ops::Kind::Social);
            Some(line("event", "[What if]".into(), None, ops))
        }
        _ => None,
    }
}

/// The simulation viewer shows public events and messages (spec §4.5), and for trading and
/// agent-based nodes their decisions and steps (they have no chat), and errors.
pub fn viewer_line(e: &LogEntry) -> Option<EventLine> {
    let line = event_line(e)?;
    let shown = matches!(line.kind, "event" | "message" | "error")
        || matches!(e.event_type(), Some(EventType::DecisionPoint | EventType::AbmStep));
    shown.then_some(line)
}

/// The wire name of an edge type (the `data-type` of a drawn edge).
pub fn edge_name(kind: EdgeType) -> &'static str {
    kind.name()
}

/// Node fill: selected wins, then root, then leaf, else white (spec §4.2).
pub fn node_fill(is_selected: bool, is_root: bool, is_leaf: bool) -> &'static str {
    if is_selected {
        "#f66"
    } else if is_root {
        "#69f"
    } else if is_leaf {
        "#7c7"
    } else {
        "#fff"
    }
}

/// A trading trader's memory line in words: the server keeps the model's replies and the tool
/// results as the JSON it exchanged (`{"text", "tool_calls"}` and `{"status", "message"}`),
/// which the agent panel shows as "the reply's text → submit_decision: buy 53 AAPL" and the
/// result's message. `None` for anything else (social memory is text already), shown as it is.
pub fn memory_text(role: &str, content: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(content).ok()?;
    let obj = v.as_object()?;
    match role {
        "assistant" => {
            let calls = obj.get("tool_calls")?.as_array()?;
            let mut out = obj.get("text").and_then(|t| t.as_str()).unwrap_or("").trim().to_string();
            for call in calls {
                let name = call.get("name").and_then(|n| n.as_str()).unwrap_or("?");
                let args = call.get("arguments").cloned().unwrap_or_default();
                let what = match args.get("orders").and_then(|o| o.as_array()) {
                    Some(orders) if orders.is_empty() => "no orders".to_string(),
                    Some(orders) => orders.iter().map(order_text).collect::<Vec<_>>().join(", "),
                    None => args.to_string(),
                };
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!("→ {name}: {what}"));
            }
            Some(out)
        }
        "tool" => obj.get("message")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// "buy 53 AAPL" from an order's JSON (what is missing is left out).
fn order_text(order: &serde_json::Value) -> String {
    let field = |k: &str| match order.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    [field("side"), field("quantity"), field("ticker")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses a numeric input as upstream does: empty → the default, unparsable → 1, clamped to ≥ 1.
pub fn parse_count(text: &str, default: u64) -> u64 {
    let t = text.trim();
    if t.is_empty() {
        return default;
    }
    t.parse::<i64>().map(|v| v.max(1) as u64).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use simtree_shared::{Attached, GraphNode};

    fn attached(node: u64, parent: Option<u64>, depth: u32, edge: EdgeType) -> TreeMsg {
        TreeMsg::Attached(Attached { node, parent, depth, edge_type: edge, ops: vec![] })
    }

    #[test]
    fn an_advance_that_ran_fewer_turns_than_asked_says_both() {
        use crate::i18n::Lang;
        let mut g = GraphModel { kind: crate::ops::Kind::Trading, ..GraphModel::default() };
        g.apply(&attached(0, None, 0, EdgeType::Root));
        let advance = |node, turns| {
            TreeMsg::Attached(Attached {
                node,
                parent: Some(0),
                depth: 1,
                edge_type: EdgeType::Advance,
                ops: vec![Op::Advance { turns }],
            })
        };
        // From the summaries: node 1 asked 200 and the episode ended after 120; node 2 ran all.
        g.apply(&advance(1, 200));
        g.apply(&advance(2, 5));
        let summary = |id, turns, edges: Vec<u64>| Summary {
            id,
            turns,
            parent: None,
            edges: edges
                .into_iter()
                .map(|to| simtree_shared::SummaryEdge { to, kind: EdgeType::Advance, ops: g.ops[&to].clone() })
                .collect(),
        };
        let summaries = [summary(0, 10, vec![1, 2]), summary(1, 130, vec![]), summary(2, 15, vec![])];
        g.set_ops(&summaries);
        assert_eq!(g.made_label(1, Lang::En).unwrap(), "+120 of 200 decisions");
        assert_eq!(g.made_label(1, Lang::Zh).unwrap(), "+120/200 决策");
        assert_eq!(g.made_label(2, Lang::En).unwrap(), "+5 decisions");
        // From the socket: a run that ends short, and one that runs its whole advance.
        g.apply(&advance(3, 50));
        g.apply(&TreeMsg::RunStart { node: 3 });
        assert_eq!(g.made_label(3, Lang::En).unwrap(), "+50 decisions", "still running");
        let finish =
            |node, turns| TreeMsg::RunFinish { node, status: NodeStatus::Cancelled, error: None, turns: Some(turns) };
        g.apply(&finish(3, 17));
        assert_eq!(g.made_label(3, Lang::En).unwrap(), "+7 of 50 decisions");
        g.apply(&advance(4, 1));
        g.apply(&finish(4, 11));
        assert_eq!(g.made_label(4, Lang::En).unwrap(), "+1 decision");
    }

    #[test]
    fn a_fan_out_stops_only_its_own_running_children() {
        let mut g = GraphModel::default();
        g.apply(&attached(0, None, 0, EdgeType::Root));
        g.apply(&attached(1, Some(0), 1, EdgeType::Advance));
        g.apply(&TreeMsg::RunStart { node: 1 });
        let fan = FanOut::start(&g, [0]);
        let leaves = FanOut::of_leaves(&g);
        for n in 2..5 {
            g.apply(&attached(n, Some(0), 1, EdgeType::Advance));
            g.apply(&TreeMsg::RunStart { node: n });
        }
        g.apply(&attached(5, Some(1), 2, EdgeType::Advance));
        g.apply(&TreeMsg::RunStart { node: 5 });
        // Node 1 ran before the fan-out: not its child. Node 5 is under another parent.
        assert_eq!(fan.running(&g), vec![2, 3, 4]);
        assert_eq!(leaves.running(&g), vec![5], "the leaves were node 1 only");
        g.apply(&TreeMsg::RunFinish { node: 3, status: NodeStatus::Done, error: None, turns: None });
        assert_eq!(fan.running(&g), vec![2, 4], "a finished child is left alone");
        assert_eq!(g.running_children(0), vec![1, 2, 4]);
    }

    #[test]
    fn the_shape_key_changes_with_the_shape_only() {
        let mut g = GraphModel::default();
        g.apply(&attached(0, None, 0, EdgeType::Root));
        g.apply(&attached(1, Some(0), 1, EdgeType::Advance));
        let shape = g.shape_key();
        // What arrives apart from the shape: ops, a run's start and end, a failure's reason.
        g.set_ops(&[Summary {
            id: 0,
            turns: 0,
            parent: None,
            edges: vec![simtree_shared::SummaryEdge {
                to: 1,
                kind: EdgeType::Advance,
                ops: vec![Op::PublicBroadcast { text: "hi".into() }],
            }],
        }]);
        g.apply(&TreeMsg::RunStart { node: 1 });
        g.apply(&TreeMsg::RunFinish { node: 1, status: NodeStatus::Failed, error: Some("boom".into()), turns: None });
        assert_eq!(g.shape_key(), shape);
        // A snapshot of the same tree keeps it too; a new node does not.
        let same = Graph {
            root: 0,
            frontier: vec![1],
            running: vec![],
            nodes: [(0, 0), (1, 1)].map(|(id, depth)| GraphNode { id, depth, status: NodeStatus::Done }).to_vec(),
            edges: g.edges.clone(),
        };
        g.apply(&TreeMsg::Snapshot(same));
        assert_eq!(g.shape_key(), shape);
        g.apply(&attached(2, Some(1), 2, EdgeType::PublicEvent));
        assert_ne!(g.shape_key(), shape);
        let grown = g.shape_key();
        g.apply(&TreeMsg::Deleted { node: 2 });
        assert_eq!(g.shape_key(), shape, "back to the first shape");
        assert_ne!(g.shape_key(), grown);
    }

    #[test]
    fn the_tree_reducer_follows_upstream() {
        let mut g = GraphModel::default();
        g.apply(&attached(0, None, 0, EdgeType::Root));
        g.apply(&attached(1, Some(0), 1, EdgeType::Advance));
        g.apply(&attached(2, Some(1), 2, EdgeType::PublicEvent));
        g.apply(&attached(3, Some(0), 1, EdgeType::Advance));
        assert_eq!(g.nodes.len(), 4);
        assert_eq!(g.edges.len(), 3);
        // A repeated attached (e.g. after a snapshot raced it) adds no duplicate edge.
        g.apply(&attached(2, Some(1), 2, EdgeType::PublicEvent));
        assert_eq!(g.edges.len(), 3);
        assert_eq!(g.apply(&TreeMsg::RunStart { node: 3 }), None, "a start is no notification");
        assert!(g.running.contains(&3));
        assert_eq!(
            g.apply(&TreeMsg::RunFinish { node: 3, status: Default::default(), error: None, turns: None }),
            Some(RunEnd { node: 3, status: NodeStatus::Done, error: None })
        );
        assert!(g.running.is_empty());
        g.apply(&TreeMsg::RunStart { node: 2 });
        g.apply(&TreeMsg::Deleted { node: 1 });
        assert_eq!(g.nodes.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(g.edges.len(), 1);
        assert!(g.running.is_empty(), "a deleted running node stops pulsing");
        assert!(g.is_leaf(3) && !g.is_leaf(0));
    }

    #[test]
    fn a_snapshot_replaces_the_model() {
        let mut g = GraphModel::default();
        g.apply(&attached(5, Some(4), 3, EdgeType::Advance));
        let snap = Graph {
            root: 0,
            frontier: vec![1],
            running: vec![1],
            nodes: vec![
                GraphNode { id: 0, depth: 0, status: Default::default() },
                GraphNode { id: 1, depth: 1, status: Default::default() },
            ],
            edges: vec![GraphEdge { from: 0, to: 1, kind: EdgeType::Advance }],
        };
        g.apply(&TreeMsg::Snapshot(snap.clone()));
        assert_eq!(g, GraphModel::from_graph(&snap));
        assert!(g.running.contains(&1));
    }

    fn delta(agent: &str, role: &str, content: &str) -> LogEntry {
        LogEntry {
            kind: "agent_ctx_delta".into(),
            data: json!({"agent": agent, "role": role, "content": content}),
            node: 1,
        }
    }

    #[test]
    fn context_deltas_follow_the_tail_growth_rule() {
        let mut v = NodeView::default();
        v.apply(delta("Ann", "user", "a"));
        v.apply(delta("Ann", "user", "b"));
        v.apply(delta("Ann", "assistant", "c"));
        v.apply(delta("Bob", "user", "x"));
        v.apply(LogEntry { kind: "action_end".into(), data: json!({}), node: 1 });
        assert_eq!(v.agents[0].memory, vec![("user".into(), "a\nb".into()), ("assistant".into(), "c".into())]);
        assert_eq!(v.agents[1].memory, vec![("user".into(), "x".into())]);
        assert_eq!(v.events.len(), 1);
    }

    #[test]
    fn event_lines_match_the_devui_formatting() {
        let e = |kind: &str, data: Value| LogEntry { kind: kind.into(), data, node: 0 };
        let public = e("system_broadcast", json!({"type": "PublicEvent", "text": "Public Event: hi"}));
        assert_eq!(event_line(&public).unwrap().label, "[Event]");
        assert_eq!(event_line(&e("system_broadcast", json!({"type": "MessageEvent", "text": "x"}))), None);
        let msg = e(
            "action_end",
            json!({"agent": "Ann", "action": {"action": "send_message", "message": "m"}, "result": {"message": "hello"}, "summary": "s"}),
        );
        let line = event_line(&msg).unwrap();
        assert_eq!((line.kind, line.agent.as_deref(), line.text.as_str()), ("message", Some("Ann"), "hello"));
        let other = e("action_end", json!({"agent": "Ann", "action": {"action": "vote"}, "summary": "Ann voted yes"}));
        assert_eq!(event_line(&other).unwrap().label, "[Action vote]");
        assert_eq!(event_line(&e("action_end", json!({"action": {"action": "yield"}}))), None);
        let deal = e("landlord_deal", json!({"bottom": ["3", "BJ"]}));
        assert_eq!(event_line(&deal).unwrap().text, "Bottom: 3 BJ");
        assert_eq!(viewer_line(&other), None);
        assert!(viewer_line(&dp_entry()).is_some(), "trading decisions show in the viewer");
        let dp = e(
            "decision_point",
            json!({
                "log": {"case_id": "x:3", "agent_output": {"text": "hold"}, "execution_result": {"message": "accepted"}},
                "portfolio": {"cash": 100.0, "positions": {}}, "value": 100.0, "done": false
            }),
        );
        assert_eq!(event_line(&dp).unwrap().text, "x:3: hold → accepted");
        let step = e("abm_step", json!({"step": 2, "values": {"globalVariable.infected": 5, "agent.P.s": ["S"]}}));
        let line = event_line(&step).unwrap();
        assert_eq!((line.label.as_str(), line.text.as_str()), ("[Step 2]", "infected=5"));
        assert!(viewer_line(&public).is_some());
    }

    fn dp_entry() -> LogEntry {
        LogEntry {
            kind: "decision_point".into(),
            data: json!({"log": {"case_id": "c"}, "portfolio": {"cash": 1.0}, "value": 1.0, "done": true}),
            node: 1,
        }
    }

    #[test]
    fn failed_runs_are_errors_and_finishes_coalesce() {
        let mut g = GraphModel::default();
        g.apply(&attached(0, None, 0, EdgeType::Root));
        g.apply(&TreeMsg::RunStart { node: 1 });
        let end = g
            .apply(&TreeMsg::RunFinish {
                node: 1,
                status: NodeStatus::Failed,
                error: Some("provider down".into()),
                turns: None,
            })
            .unwrap();
        assert_eq!(g.status_of(1), NodeStatus::Failed);
        assert_eq!(g.errors[&1], "provider down");
        let mut t = Toasts::default();
        t.run_end(&end);
        for n in 2..15 {
            t.run_end(&RunEnd { node: n, status: NodeStatus::Done, error: None });
        }
        assert_eq!(t.items.len(), 2, "13 finishes are one toast: {:?}", t.items);
        assert_eq!(t.items[0].level, Level::Error);
        assert_eq!(t.items[1].note, Note::Finished((2..15).collect()));
        assert_eq!(t.items[1].count, 1, "13 runs listed, not 13 repeats of them");
        for n in [30, 20] {
            t.run_end(&RunEnd { node: n, status: NodeStatus::Cancelled, error: None });
        }
        assert_eq!((&t.items[2].note, t.items[2].count), (&Note::Cancelled(vec![20, 30]), 1));
        t.dismiss(t.items[2].id);
        let (id, stamp) = (t.items[1].id, t.items[1].touched);
        t.expire(t.items[0].id, t.items[0].touched);
        assert_eq!(t.items.len(), 2, "errors do not expire");
        t.expire(id, stamp);
        assert_eq!(t.items.len(), 1);
        t.dismiss(t.items[0].id);
        assert!(t.items.is_empty());
        for i in 0..5 {
            t.push(Level::Info, Note::Text(format!("m{i}")));
        }
        assert_eq!(t.items.len(), Toasts::MAX);
    }

    #[test]
    fn progress_follows_the_running_node_until_its_run_ends() {
        let mut g = GraphModel::default();
        let mut p = Progress::default();
        let feed = |msg: TreeMsg, g: &mut GraphModel, p: &mut Progress| {
            g.apply(&msg);
            p.apply(&msg, g)
        };
        feed(attached(1, Some(0), 1, EdgeType::Advance), &mut g, &mut p);
        feed(TreeMsg::RunStart { node: 1 }, &mut g, &mut p);
        let step = |done| TreeMsg::RunProgress { node: 1, done, total: 10 };
        assert!(feed(step(3), &mut g, &mut p));
        assert_eq!(p.of(1), Some(Turns { done: 3, total: 10 }));
        assert!(!feed(step(3), &mut g, &mut p), "a repeat changes nothing");
        assert!((p.of(1).unwrap().fraction() - 0.3).abs() < 1e-9);
        let finish = TreeMsg::RunFinish { node: 1, status: NodeStatus::Done, error: None, turns: None };
        assert!(feed(finish, &mut g, &mut p));
        assert_eq!(p.of(1), None, "a finished run shows no progress");
        // A snapshot drops the progress of nodes that no longer run; a delete too.
        feed(TreeMsg::RunStart { node: 2 }, &mut g, &mut p);
        feed(TreeMsg::RunProgress { node: 2, done: 1, total: 4 }, &mut g, &mut p);
        feed(TreeMsg::RunProgress { node: 5, done: 1, total: 4 }, &mut g, &mut p);
        let snap = Graph { root: 0, frontier: vec![], running: vec![2], nodes: vec![], edges: vec![] };
        feed(TreeMsg::Snapshot(snap), &mut g, &mut p);
        assert_eq!((p.of(2).is_some(), p.of(5)), (true, None));
        feed(TreeMsg::Deleted { node: 2 }, &mut g, &mut p);
        assert_eq!(p.of(2), None);
        assert_eq!(Turns { done: 1, total: 0 }.fraction(), 0.0);
    }

    #[test]
    fn a_plan_reads_as_one_line_and_an_empty_plan_as_none() {
        let words = ["goals", "milestones", "strategy", "notes"];
        let plan = serde_json::json!({
            "goals": [{"id": "g1", "desc": "win the vote", "status": "active"}, {"id": "g2"}],
            "strategy": "listen first"
        });
        assert_eq!(
            plan_text(&plan, words).as_deref(),
            Some("goals: win the vote [active]; g2 · strategy: listen first")
        );
        assert_eq!(plan_text(&serde_json::json!({}), words), None);
        assert_eq!(plan_text(&serde_json::json!("not a plan"), words), None);
    }

    #[test]
    fn numeric_inputs_parse_like_upstream() {
        assert_eq!(parse_count("", 5), 5);
        assert_eq!(parse_count("3", 5), 3);
        assert_eq!(parse_count("-2", 5), 1);
        assert_eq!(parse_count("abc", 5), 1);
    }

    #[test]
    fn colours_and_fills() {
        assert_eq!(node_fill(true, true, true), "#f66");
        assert_eq!(node_fill(false, true, false), "#69f");
        assert_eq!(node_fill(false, false, true), "#7c7");
        assert_eq!(node_fill(false, false, false), "#fff");
    }

    #[test]
    fn a_traders_memory_reads_as_words_and_other_memory_stays_as_it_is() {
        let reply = r#"{"text":"Mock analysis: buy.","tool_calls":[{"id":"c1","name":"submit_decision","arguments":{"orders":[{"ticker":"AAPL","side":"buy","quantity":53},{"ticker":"MSFT","side":"sell","quantity":7}]}}]}"#;
        assert_eq!(
            memory_text("assistant", reply).as_deref(),
            Some("Mock analysis: buy.\n→ submit_decision: buy 53 AAPL, sell 7 MSFT")
        );
        let hold = r#"{"text":"","tool_calls":[{"name":"submit_decision","arguments":{"orders":[]}}]}"#;
        assert_eq!(memory_text("assistant", hold).as_deref(), Some("→ submit_decision: no orders"));
        let result = r#"{"status":"accepted","message":"accepted: hold (no orders)","executed_trades":[]}"#;
        assert_eq!(memory_text("tool", result).as_deref(), Some("accepted: hold (no orders)"));
        // Social memory, JSON that is not a reply, and broken JSON are shown as they are.
        assert_eq!(memory_text("user", "[18:00] Night has fallen."), None);
        assert_eq!(memory_text("assistant", r#"{"action":"speak"}"#), None);
        assert_eq!(memory_text("assistant", r#"{"text":"x","tool_calls":"#), None);
        assert_eq!(memory_text("tool", "[1,2]"), None);
    }
}
