//! What the sweep and exploration panels share: the panel itself (its title, the tree's list of
//! jobs, the chosen job's table, the form below), the list kept live (read when the tree opens and
//! again after a resync, one table refreshed per progress message), and the form's frame (the node
//! it starts from, its estimate, the server's refusal shown in place, the start button). What a
//! kind of job is — its routes, its ids, its words — is its [`Job`] impl, in its own view file.

use std::future::Future;

use leptos::attr::custom::custom_attribute;
use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::{NodeStatus, TreeMsg};

use crate::api::ApiError;
use crate::estimate::{EstimateLine, debounced_estimate};
use crate::field::labelled;
use crate::state::{Ctx, Tree, ctx};

/// The ids and words of one kind's panel.
pub struct JobNames {
    /// The kind's name (`sweep`): its run route, and the prefix of the panel's element ids
    /// (`{name}s` the section, `{name}-list`, `{name}-new`, `{name}-estimate`, `{name}-error`,
    /// `{name}-start`, and `data-{name}` on a job's button in the list).
    pub name: &'static str,
    /// The i18n keys of the panel's title, of its words when there is no job, of the form's
    /// summary and of its start button.
    pub title: &'static str,
    pub none: &'static str,
    pub new: &'static str,
    pub start: &'static str,
}

/// A kind of job a tree runs from one of its nodes and a panel lists: how to read its tables and
/// start one.
pub trait Job: Clone + Send + Sync + 'static {
    const NAMES: JobNames;
    fn id(&self) -> u64;
    /// Where its button in the list says it stands (after `#id · from #parent · `).
    fn standing(&self, ctx: Ctx) -> String;
    /// The node it started from.
    fn parent(&self) -> u64;
    /// Every job of this kind of a tree.
    fn all(tree: u64) -> impl Future<Output = Result<Vec<Self>, ApiError>> + 'static;
    /// One job of a tree.
    fn one(tree: u64, id: u64) -> impl Future<Output = Result<Self, ApiError>> + 'static;
    /// Starts one with this body; the new job's id.
    fn start(tree: u64, body: Value) -> impl Future<Output = Result<u64, ApiError>> + 'static;
    /// The job a socket message reports progress of.
    fn progress(msg: &TreeMsg) -> Option<u64>;
    /// Puts a fresh table in the list (replacing the old one, or appended).
    fn merge(list: &mut Vec<Self>, table: Self);
}

/// A panel's jobs: every table, the chosen job's id, and what to call once one has started.
pub struct JobList<T: Send + Sync + 'static> {
    pub tables: RwSignal<Vec<T>>,
    pub chosen: RwSignal<Option<u64>>,
    pub started: Callback<u64>,
}

impl<T: Send + Sync + 'static> Clone for JobList<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Send + Sync + 'static> Copy for JobList<T> {}

impl<T: Job> JobList<T> {
    /// The chosen job's table.
    pub fn table(self) -> Option<T> {
        let id = self.chosen.get()?;
        self.tables.with(|list| list.iter().find(|t| t.id() == id).cloned())
    }
}

/// The tree's jobs of one kind, kept live: a job started elsewhere (another tab, a script)
/// shows when none is chosen.
fn job_list<T: Job>(tree: Tree) -> JobList<T> {
    let tables = RwSignal::new(Vec::<T>::new());
    let chosen = RwSignal::new(None::<u64>);
    let reload = move |t: u64| {
        leptos::task::spawn_local(async move {
            if let Ok(list) = T::all(t).await {
                if chosen.get_untracked().is_none() {
                    chosen.set(list.last().map(T::id));
                }
                tables.set(list);
            }
        });
    };
    Effect::new(move |_| {
        if let Some(t) = tree.id.get() {
            reload(t);
        }
    });
    Effect::new(move |_| {
        let Some(t) = tree.id.get_untracked() else { return };
        let msg = tree.last_msg.get();
        if let Some(id) = msg.as_ref().and_then(T::progress) {
            leptos::task::spawn_local(async move {
                if let Ok(table) = T::one(t, id).await {
                    tables.update(|list| T::merge(list, table));
                    if chosen.get_untracked().is_none() {
                        chosen.set(Some(id));
                    }
                }
            });
        } else if let Some(TreeMsg::Snapshot(_)) = msg {
            reload(t);
        }
    });
    let started = Callback::new(move |id: u64| {
        chosen.set(Some(id));
        if let Some(t) = tree.id.get_untracked() {
            reload(t);
        }
    });
    JobList { tables, chosen, started }
}

/// A kind's panel: its title, a button per job of the tree (the chosen one lit), the chosen job
/// drawn by `result` (again when the language changes: its words are fixed when drawn), and
/// below, the form `form` makes with the callback to run once a job has started.
pub fn job_panel<T: Job, R: IntoView + 'static, F: IntoView>(
    tree: Tree,
    result: impl Fn(T) -> R + Send + Sync + 'static,
    form: impl FnOnce(Callback<u64>) -> F,
) -> impl IntoView {
    let ctx = ctx();
    let names = T::NAMES;
    let list = job_list::<T>(tree);
    let JobList { tables, chosen, started } = list;
    let picks = move || {
        let all = tables.get();
        if all.is_empty() {
            return view! { <p class="muted">{ctx.tr(names.none)}</p> }.into_any();
        }
        all.into_iter()
            .map(|job| {
                let id = job.id();
                let text = format!("#{id} · {} #{} · {}", ctx.tr("sweep.from"), job.parent(), job.standing(ctx));
                view! {
                    <button class="sweep-pick" class:active=move || chosen.get() == Some(id)
                        on:click=move |_| chosen.set(Some(id))>{text}</button>
                }
                .add_any_attr(custom_attribute(format!("data-{}", names.name), id))
            })
            .collect_view()
            .into_any()
    };
    view! {
        <section id=format!("{}s", names.name) class=format!("panel {}s", names.name)>
            <h3>{move || ctx.tr(names.title)}</h3>
            <div id=format!("{}-list", names.name) class="sweep-list">{picks}</div>
            {move || {
                ctx.lang.track();
                list.table().map(&result)
            }}
            {form(started)}
        </section>
    }
}

/// The form that starts a job of kind `T` from the selected node, around the kind's own
/// `fields`: the node it starts from, what the job would cost (asked again as `body` changes;
/// nothing while the node runs, which the server refuses to start from), the server's refusal in
/// place and the start button. `body` makes the request's body for a parent node from the fields,
/// or the words saying what is wrong with them.
pub fn job_form<T: Job>(
    tree: Tree,
    started: Callback<u64>,
    body: impl Fn(u64) -> Result<Value, String> + Copy + Send + Sync + 'static,
    fields: impl IntoView,
) -> impl IntoView {
    let ctx = ctx();
    let names = T::NAMES;
    let error = RwSignal::new(None::<String>);
    let sending = RwSignal::new(false);
    let estimate = debounced_estimate(move || {
        let (t, parent) = (tree.id.get()?, tree.selected.get()?);
        if tree.graph.with(|g| g.status_of(parent)) == NodeStatus::Running {
            return None;
        }
        Some((t, names.name, body(parent).ok()?))
    });
    let start = move |_| {
        let (Some(t), Some(parent)) = (tree.id.get_untracked(), tree.selected.get_untracked()) else {
            return;
        };
        match untrack(|| body(parent)) {
            // The server names the field at fault (`axes[0].values`, `metrics.peak: …`).
            Ok(body) => send_start(T::start(t, body), error, sending, move |id| started.run(id)),
            Err(e) => error.set(Some(e)),
        }
    };
    view! {
        <details id=format!("{}-new", names.name) class="sweep-new">
            <summary>{move || ctx.tr(names.new)} " " {move || tree.selected.get().map(|n| format!("#{n}"))}</summary>
            {fields}
            <EstimateLine id=format!("{}-estimate", names.name) estimate=estimate />
            {move || error.get().map(|e| view! { <p id=format!("{}-error", names.name) class="reason">{e}</p> })}
            <button id=format!("{}-start", names.name) class="primary" disabled=move || sending.get() || tree.selected.get().is_none() on:click=start>
                {move || ctx.tr(names.start)}
            </button>
        </details>
    }
}

/// A labelled text field bound to one field of a form.
pub fn text_input<F: Clone + Send + Sync + 'static>(
    form: RwSignal<F>,
    id: &'static str,
    key: &'static str,
    field: fn(&mut F) -> &mut String,
) -> impl IntoView {
    let input = view! {
        <input id=id prop:value=move || form.with(|f| field(&mut f.clone()).clone())
            on:input=move |ev| form.update(|f| *field(f) = event_target_value(&ev)) />
    };
    labelled(key, id, input)
}

/// Sends a start; on success `done` gets the reply, on a refusal `error` shows the server's
/// words (it names the field at fault).
fn send_start<R: 'static>(
    call: impl Future<Output = Result<R, ApiError>> + 'static,
    error: RwSignal<Option<String>>,
    sending: RwSignal<bool>,
    done: impl FnOnce(R) + 'static,
) {
    let ctx = ctx();
    error.set(None);
    sending.set(true);
    leptos::task::spawn_local(async move {
        match call.await {
            Ok(r) => done(r),
            Err(ApiError::Http(_, body)) => error.set(Some(body.detail)),
            Err(ApiError::Offline) => ctx.went_offline(),
            Err(e) => error.set(Some(e.to_string())),
        }
        sending.set(false);
    });
}
