//! The UI's shared state, which every page and panel reads: [`Ctx`] (route, language, theme,
//! notifications, server reachability, in context), [`Tree`] — one connected tree (graph model
//! kept live by the tree socket with reconnects, selection, compare target, the kind and name of
//! what it simulates) — and the in-app [`Link`]. The shell (`app`) provides it; pages import it
//! from here, never from `app`, so `app` → pages → state points one way.

use std::collections::HashSet;

use leptos::prelude::*;
use simtree_shared::{Annotation, TreeMsg};
use wasm_bindgen::prelude::*;

use crate::api::{self, ApiError, Socket};
use crate::i18n::{Lang, t};
use crate::live::LiveText;
use crate::model::{GraphModel, Level, Note, Progress, Toasts, Turns};
use crate::notebook::Marks;
use crate::ops::{Kind, scenario_label};
use crate::route::Route;

/// How long an info toast stays (errors stay until dismissed).
const TOAST_MS: i32 = 5000;

/// Context shared by every component.
#[derive(Clone, Copy)]
pub struct Ctx {
    pub route: RwSignal<Route>,
    pub lang: RwSignal<Lang>,
    pub toasts: RwSignal<Toasts>,
    /// True while the server does not answer (the banner shows).
    pub offline: RwSignal<bool>,
    /// `Some("light" | "dark")` when the user chose; `None` follows the system.
    pub theme: RwSignal<Option<&'static str>>,
    /// The system asks for a dark theme (`prefers-color-scheme`), kept up to date as it changes.
    /// The stylesheet follows it by itself; what reads the theme's colours (the graph's canvas)
    /// reads them again when it changes.
    pub system_dark: RwSignal<bool>,
    /// Counts model calls made outside runs (an agent asked at a node): no tree message says
    /// so, and the usage figures read again when it moves.
    pub spent: RwSignal<u64>,
}

pub fn ctx() -> Ctx {
    expect_context::<Ctx>()
}

impl Ctx {
    /// Goes to `route` (pushes a history entry).
    pub fn navigate(&self, route: Route) {
        if let Some(h) = web_sys::window().and_then(|w| w.history().ok()) {
            let _ = h.push_state_with_url(&JsValue::NULL, "", Some(&route.href()));
        }
        self.route.set(route);
    }

    /// Shows a notification; info expires after five seconds unless renewed by a merge.
    pub fn notify(&self, level: Level, note: Note) {
        let (id, stamp) = self.toasts.try_update(|t| t.push(level, note)).unwrap_or((0, 0));
        self.expire_later(id, stamp);
    }

    fn expire_later(&self, id: u64, stamp: u64) {
        let toasts = self.toasts;
        leptos::task::spawn_local(async move {
            api::sleep(TOAST_MS).await;
            toasts.try_update(|t| t.expire(id, stamp));
        });
    }

    /// Shows an error: an unreachable server raises the banner instead of a toast.
    pub fn error(&self, e: ApiError) {
        if e == ApiError::Offline {
            self.went_offline();
        } else {
            self.notify(Level::Error, Note::Text(e.to_string()));
        }
    }

    /// Raises the banner and polls `/health` until the server answers again.
    /// What to show under a field for a failed request: the server's own words for a refusal
    /// (or the browser's), nothing for an unreachable server (the shell's banner says so, and
    /// this starts it).
    pub fn refusal(&self, e: crate::api::ApiError) -> Option<String> {
        use crate::api::ApiError;
        match e {
            ApiError::Offline => {
                self.went_offline();
                None
            }
            ApiError::Http(_, body) | ApiError::NotFound(body) => Some(body.detail),
            ApiError::Client(text) => Some(text),
        }
    }

    pub fn went_offline(&self) {
        if self.offline.get_untracked() {
            return;
        }
        self.offline.set(true);
        let offline = self.offline;
        leptos::task::spawn_local(async move {
            loop {
                api::sleep(1500).await;
                if api::health().await.is_ok() {
                    offline.try_set(false);
                    return;
                }
            }
        });
    }

    pub fn tr(&self, key: &'static str) -> &'static str {
        t(self.lang.get(), key)
    }
}

/// The browser tab's title.
pub fn set_title(title: &str) {
    if let Some(d) = web_sys::window().and_then(|w| w.document()) {
        d.set_title(title);
    }
}

/// Where the connection to one tree stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    Connecting,
    Live,
    Lost,
    /// The tree does not exist: nothing to poll.
    NotFound,
}

/// One tree the page is connected to.
#[derive(Clone, Copy)]
pub struct Tree {
    pub id: RwSignal<Option<u64>>,
    pub graph: RwSignal<GraphModel>,
    /// How far each running node has got (`run_progress`), apart from the graph: it changes up
    /// to ten times a second per run and must not re-lay out the tree or refetch panels.
    pub progress: RwSignal<Progress>,
    /// What each running node's model is writing now (`delta`), apart from the graph likewise.
    pub live: RwSignal<LiveText>,
    pub selected: RwSignal<Option<u64>>,
    /// Second node of a comparison (shift-click or the compare input).
    pub compare_with: RwSignal<Option<u64>>,
    /// The latest tree-socket message (pages react to `attached`/`run_finish` of their node).
    pub last_msg: RwSignal<Option<TreeMsg>>,
    pub conn: RwSignal<Conn>,
    /// What the tree simulates, from its root's view.
    pub kind: RwSignal<Kind>,
    pub scenario: RwSignal<String>,
    /// The tree's name (its metadata's, editable in the tree browser); empty until read.
    pub name: RwSignal<String>,
    /// A request of this page is in flight: the run buttons are disabled (no double runs).
    pub busy: RwSignal<bool>,
    /// The parent whose next attached child gets selected (the view follows the new node).
    pub follow: RwSignal<Option<u64>>,
    /// False from [`Tree::connect`] until the graph it read is on screen (or could not be read):
    /// the side panes, the minimap and the reads only they need wait for it, so that a big
    /// tree's first drawing does not wait for them.
    pub shown: RwSignal<bool>,
    /// The notebook's marks of annotated nodes (title, star, tags), from the summaries and kept
    /// up to date by this page's edits; the nodes a search lit up; the tag the graph filters on.
    pub marks: RwSignal<Marks>,
    pub lit: RwSignal<HashSet<u64>>,
    pub tag: RwSignal<Option<String>>,
    /// The latest annotation the socket brought (`marks`: an edit from any window), for the
    /// notes panel of that node; the latest description likewise (`tree_edited`).
    pub noted: RwSignal<Option<(u64, Annotation)>>,
    pub described: RwSignal<Option<String>>,
    socket: StoredValue<Option<Socket>, LocalStorage>,
    /// Taken when the tree is made: socket callbacks and tasks run outside the component owner.
    ctx: Ctx,
}

impl Tree {
    pub fn new() -> Tree {
        let tree = Tree {
            id: RwSignal::new(None),
            graph: RwSignal::new(GraphModel::default()),
            progress: RwSignal::new(Progress::default()),
            live: RwSignal::new(LiveText::default()),
            selected: RwSignal::new(None),
            compare_with: RwSignal::new(None),
            last_msg: RwSignal::new(None),
            conn: RwSignal::new(Conn::Connecting),
            kind: RwSignal::new(Kind::Social),
            scenario: RwSignal::new(String::new()),
            name: RwSignal::new(String::new()),
            busy: RwSignal::new(false),
            follow: RwSignal::new(None),
            shown: RwSignal::new(true),
            marks: RwSignal::new(Marks::default()),
            lit: RwSignal::new(HashSet::new()),
            tag: RwSignal::new(None),
            noted: RwSignal::new(None),
            described: RwSignal::new(None),
            socket: StoredValue::new_local(None),
            ctx: ctx(),
        };
        on_cleanup(move || tree.socket.set_value(None));
        tree
    }

    /// Whether `node` runs now: its state cannot be read (the server answers 409) until its
    /// `run_finish`, so nothing asks for it meanwhile.
    pub fn is_running(self, node: u64) -> bool {
        self.graph.with_untracked(|g| g.status_of(node) == simtree_shared::NodeStatus::Running)
    }

    /// A running node's progress as "turn 3/10" (in the unit of the tree's kind), with its
    /// numbers; `None` while no `run_progress` came for it.
    pub fn progress_of(self, node: u64) -> Option<(String, Turns)> {
        let t = self.progress.with(|p| p.of(node))?;
        let unit = self.ctx.tr(self.kind.get().progress_unit());
        Some((format!("{unit} {}/{}", t.done, t.total), t))
    }

    /// Connects to tree `id`: reads the graph (a 404 ends it: "not found", no polling), and once
    /// it is drawn ([`Tree::shown`]) selects node `start` (a deep link's; the root when it is
    /// `None` or not in the tree), reads the ops and the root's view, then follows the tree
    /// socket, reconnecting after drops (the server's snapshot on connect resyncs the model).
    pub fn connect(self, id: u64, start: Option<u64>) {
        self.id.set(Some(id));
        self.shown.set(false);
        self.noted.set(None);
        self.described.set(None);
        let ctx = self.ctx;
        leptos::task::spawn_local(async move {
            let g = loop {
                match api::graph(id).await {
                    Ok(g) => break g,
                    Err(ApiError::NotFound(_)) => {
                        self.conn.try_set(Conn::NotFound);
                        return;
                    }
                    Err(e) => {
                        ctx.error(e);
                        self.shown.try_set(true);
                        api::sleep(2000).await;
                        if self.id.try_get_untracked() != Some(Some(id)) {
                            return;
                        }
                    }
                }
            };
            if self.id.get_untracked() != Some(id) {
                return;
            }
            api::storage_set("devui:lastTreeId", &id.to_string());
            crate::mark("graph");
            self.graph.set(GraphModel { kind: self.kind.get_untracked(), ..GraphModel::from_graph(&g) });
            // Everything else (the panes' reads and drawing, the ops, a second copy of the graph
            // from the socket's snapshot) costs as much again on a first load, when the wasm
            // still runs unoptimised: it waits until the graph has been painted.
            api::after_paint().await;
            if self.id.try_get_untracked() != Some(Some(id)) {
                return;
            }
            self.shown.set(true);
            let known = start.filter(|n| self.graph.with_untracked(|m| m.nodes.contains_key(n)));
            if let Some(n) = start.filter(|_| known.is_none()) {
                // A deep link to a node the tree does not hold: said, not silently replaced.
                let lang = ctx.lang.get_untracked();
                let text = format!(
                    "{} {}",
                    t(lang, "notFound.node").replace("{{id}}", &n.to_string()),
                    t(lang, "notFound.showingRoot")
                );
                ctx.notify(Level::Error, Note::Text(text));
            }
            self.selected.set(Some(known.unwrap_or(g.root)));
            self.load_ops();
            if let Ok(v) = api::node_view(id, g.root).await {
                self.kind.try_set(Kind::of_view(&v));
                self.graph.update(|m| m.kind = Kind::of_view(&v));
                self.scenario.try_set(scenario_label(&v));
            }
            self.open_socket(id, 0);
            if let Ok(list) = api::trees().await
                && let Some(info) = list.into_iter().find(|t| t.id == id)
            {
                self.name.try_set(info.name);
            }
        });
    }

    /// The ops of every edge (labels, colours) and the nodes' annotations; the graph route
    /// carries neither.
    fn load_ops(self) {
        let Some(id) = self.id.get_untracked() else { return };
        leptos::task::spawn_local(async move {
            if let Ok(s) = api::summaries(id).await {
                self.marks.try_set(Marks::from_summaries(&s));
                let plain: Vec<_> = s.into_iter().map(|n| n.summary).collect();
                self.graph.try_update(|g| g.set_ops(&plain));
            }
        });
    }

    fn open_socket(self, id: u64, attempt: u32) {
        let ctx = self.ctx;
        let on_msg = move |msg: TreeMsg| {
            let progress =
                |msg: &TreeMsg| self.graph.with_untracked(|g| self.progress.maybe_update(|p| p.apply(msg, g)));
            let live = |msg: &TreeMsg| self.graph.with_untracked(|g| self.live.maybe_update(|l| l.apply(msg, g)));
            if let TreeMsg::RunProgress { .. } = msg {
                // Only the progress marks change: the graph, the panels and `last_msg` stay.
                progress(&msg);
                return;
            }
            if let TreeMsg::Delta { .. } = msg {
                // Likewise only the live text.
                live(&msg);
                return;
            }
            // Notes written in any window: the marks the graph draws, the panels that show them.
            match msg {
                TreeMsg::Marks { node, title, note, tags, starred } => {
                    let a = Annotation { title, note, tags, starred };
                    self.marks.update(|m| m.set(node, Some(&a)));
                    self.noted.set(Some((node, a)));
                    return;
                }
                TreeMsg::TreeEdited { name, description } => {
                    self.name.set(name);
                    self.described.set(Some(description.unwrap_or_default()));
                    return;
                }
                _ => {}
            }
            let mut end = None;
            self.graph.update(|g| end = g.apply(&msg));
            progress(&msg);
            live(&msg);
            if let Some(end) = end {
                let (id, stamp) = ctx.toasts.try_update(|t| t.run_end(&end)).unwrap_or((0, 0));
                ctx.expire_later(id, stamp);
            }
            match &msg {
                TreeMsg::Attached(a) if a.parent.is_some() && a.parent == self.follow.get_untracked() => {
                    self.follow.set(None);
                    self.selected.set(Some(a.node));
                }
                TreeMsg::Deleted { .. } => {
                    let gone = self
                        .selected
                        .get_untracked()
                        .is_some_and(|s| !self.graph.with_untracked(|g| g.nodes.contains_key(&s)));
                    if gone {
                        self.selected.set(Some(self.graph.with_untracked(|g| g.root)));
                    }
                }
                _ => {}
            }
            self.last_msg.set(Some(msg));
        };
        let on_open = move || {
            self.conn.try_set(Conn::Live);
            ctx.offline.try_set(false);
        };
        let on_close = move || {
            if self.id.try_get_untracked() != Some(Some(id)) {
                return;
            }
            self.conn.try_set(Conn::Lost);
            self.socket.try_set_value(None);
            // Back off 1, 2, 4, … 10 s; ask /health so the banner shows while the server is away.
            let wait = 1000 * 2_i32.pow(attempt.min(3)).min(10);
            leptos::task::spawn_local(async move {
                if let Err(e) = api::health().await {
                    ctx.error(e);
                }
                api::sleep(wait).await;
                if self.id.try_get_untracked() == Some(Some(id)) {
                    self.open_socket(id, attempt + 1);
                }
            });
        };
        match api::watch_tree(id, on_msg, on_open, on_close) {
            Ok(s) => self.socket.set_value(Some(s)),
            Err(e) => ctx.error(e),
        }
    }

    /// Re-reads the graph and the ops over REST (the Refresh button).
    pub fn refresh(self) {
        let Some(id) = self.id.get_untracked() else {
            return;
        };
        leptos::task::spawn_local(async move {
            if let Ok(g) = api::graph(id).await {
                let ops = self.graph.with_untracked(|m| m.ops.clone());
                self.graph.set(GraphModel { ops, kind: self.kind.get_untracked(), ..GraphModel::from_graph(&g) });
                self.load_ops();
            }
        });
    }

    /// Runs a request of this tree: the run buttons stay disabled until it answers, a second
    /// call while one is in flight is ignored, and its error is shown.
    pub fn run(self, fut: impl std::future::Future<Output = Result<(), ApiError>> + 'static) {
        if self.busy.get_untracked() {
            return;
        }
        self.busy.set(true);
        let ctx = self.ctx;
        leptos::task::spawn_local(async move {
            let r = fut.await;
            self.busy.try_set(false);
            if let Err(e) = r {
                self.follow.try_set(None);
                ctx.error(e);
            }
        });
    }
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new()
    }
}

/// An in-app link: a real `href` (deep-linkable), navigation without a reload.
#[component]
pub fn Link(route: Route, #[prop(optional)] id: &'static str, children: Children) -> impl IntoView {
    let ctx = ctx();
    let href = route.href();
    view! {
        <a
            id=id
            href=href
            on:click=move |ev: web_sys::MouseEvent| {
                ev.prevent_default();
                ctx.navigate(route.clone());
            }
        >
            {children()}
        </a>
    }
}
