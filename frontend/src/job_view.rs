//! What the sweep and exploration panels share: the tree's list of jobs (read when the tree
//! opens and again after a resync, one table refreshed per progress message, the chosen one),
//! the form's text fields, and sending a start with the server's refusal shown in place.

use std::future::Future;

use leptos::prelude::*;
use simtree_shared::TreeMsg;

use crate::api::ApiError;
use crate::state::{Tree, ctx};

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

impl<T: Clone + Send + Sync + 'static> JobList<T> {
    /// The chosen job's table.
    pub fn table(self, id_of: fn(&T) -> u64) -> Option<T> {
        let id = self.chosen.get()?;
        self.tables.with(|list| list.iter().find(|t| id_of(t) == id).cloned())
    }
}

/// How a panel reads its jobs.
pub struct JobKind<T, FA, FO> {
    /// Every job of a tree.
    pub all: FA,
    /// One job of a tree.
    pub one: FO,
    pub id_of: fn(&T) -> u64,
    /// The job a socket message reports progress of.
    pub progress: fn(&TreeMsg) -> Option<u64>,
    /// Puts a fresh table in the list (replacing the old one, or appended).
    pub merge: fn(&mut Vec<T>, T),
}

/// The tree's jobs of one kind, kept live: a job started elsewhere (another tab, a script)
/// shows when none is chosen.
pub fn job_list<T, FA, All, FO, One>(tree: Tree, kind: JobKind<T, FA, FO>) -> JobList<T>
where
    T: Clone + Send + Sync + 'static,
    FA: Fn(u64) -> All + Copy + Send + Sync + 'static,
    All: Future<Output = Result<Vec<T>, ApiError>> + 'static,
    FO: Fn(u64, u64) -> One + Copy + Send + Sync + 'static,
    One: Future<Output = Result<T, ApiError>> + 'static,
{
    let JobKind {
        all,
        one,
        id_of,
        progress,
        merge,
    } = kind;
    let tables = RwSignal::new(Vec::<T>::new());
    let chosen = RwSignal::new(None::<u64>);
    let reload = move |t: u64| {
        leptos::task::spawn_local(async move {
            if let Ok(list) = all(t).await {
                if chosen.get_untracked().is_none() {
                    chosen.set(list.last().map(id_of));
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
        if let Some(id) = msg.as_ref().and_then(progress) {
            leptos::task::spawn_local(async move {
                if let Ok(table) = one(t, id).await {
                    tables.update(|list| merge(list, table));
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
    JobList {
        tables,
        chosen,
        started,
    }
}

/// A labelled text field bound to one field of a form.
pub fn text_input<F: Clone + Send + Sync + 'static>(
    form: RwSignal<F>,
    id: &'static str,
    key: &'static str,
    field: fn(&mut F) -> &mut String,
) -> impl IntoView {
    let ctx = ctx();
    view! {
        <div class="field">
            <label for=id>{move || ctx.tr(key)}</label>
            <input id=id prop:value=move || form.with(|f| field(&mut f.clone()).clone())
                on:input=move |ev| form.update(|f| *field(f) = event_target_value(&ev)) />
        </div>
    }
}

/// Sends a start; on success `done` gets the reply, on a refusal `error` shows the server's
/// words (it names the field at fault).
pub fn send_start<R: 'static>(
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
