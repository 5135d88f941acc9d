//! The New page (`/new[/social|/trading|/abm]`): write a scenario of one kind and make a tree of
//! it, save it to the scenario library, or start from any shipped or saved scenario as a copy
//! (`?from=ID` deep-links that).
//!
//! Each kind's document is one JSON value ([`Doc`]) with two views, both editable: the kind's
//! form (`social`, `trading`, `abm`) and the JSON view beside it. A form edit writes one place of
//! the document and re-prints the JSON; JSON that parses replaces the document (the form follows),
//! JSON that does not shows its error under the text and leaves the document — and so the form —
//! as it was. The three documents live as long as the page, so switching kinds loses nothing.
//!
//! Errors are shown where they happen: a refusal of "create" or "save" under its button (with a
//! link to the JSON line its path names), a CSV's under the upload, the generator's under its
//! button. Nothing here raises a toast except an unreachable server (the shell's banner).
//!
//! The page's draft (each kind's text, the library name, the scenario started from) is kept in
//! the tab's sessionStorage ([`kept`]) and restored when the page opens again. `?tree=N` starts
//! from the document tree N was made from (its library scenario and version, when it was made
//! from one), and with its prompt layout.
//!
//! While the JSON view holds text that is not a document, the document is the last one that
//! was; making a tree of it or saving it would not be what the user sees, so Create and Save are
//! disabled until the JSON parses again (and say why).

mod abm;
mod custom;
mod describe;
mod kept;
mod library;
mod social;
mod trading;

use leptos::html;
use leptos::prelude::*;
use serde_json::Value;
use simtree_shared::{
    CreateRequest, PromptLayout, RolePrompt, ScenarioOrigin, ScenarioSource, ScenarioSummary, SimKind,
};
use wasm_bindgen::JsCast;

use crate::api::{self, ApiError};
use crate::draft::{self, kind_of, line_of_path, line_span, pretty, refusal_path, set_at, text_at, title_of};
use crate::field::labelled;
use crate::route::{Route, Start};
use crate::state::{Link, ctx, set_title};

/// One kind's document and its JSON view.
#[derive(Clone, Copy)]
pub(super) struct Doc {
    pub value: RwSignal<Value>,
    /// What the JSON view shows: the document printed, or what the user typed there.
    text: RwSignal<String>,
    /// Why the typed JSON is not taken (it does not parse, or is no object).
    text_error: RwSignal<Option<String>>,
    /// The place (a JSON pointer) the server's last refusal named, marked on its form field
    /// until the document is edited.
    refused: RwSignal<Option<String>>,
    area: NodeRef<html::Textarea>,
}

impl Doc {
    fn new(value: Value) -> Doc {
        Doc {
            text: RwSignal::new(pretty(&value)),
            value: RwSignal::new(value),
            text_error: RwSignal::new(None),
            refused: RwSignal::new(None),
            area: NodeRef::new(),
        }
    }

    /// `value`, or the text a kept draft had in the JSON view (read as if typed there).
    fn restored(value: Value, kept: Option<String>) -> Doc {
        let doc = Doc::new(value);
        if let Some(text) = kept {
            doc.typed(text);
        }
        doc
    }

    /// A form's edit: the document changes in place and the JSON view shows it.
    pub fn edit(self, f: impl FnOnce(&mut Value)) {
        self.value.update(f);
        self.text.set(self.value.with_untracked(pretty));
        self.text_error.set(None);
        self.refused.set(None);
    }

    /// The class of the form field showing `ptr`: `invalid` while the last refusal names it.
    pub fn field_class(self, ptr: &str) -> &'static str {
        if self.refused.with(|r| r.as_deref().is_some_and(|bad| draft::within(bad, ptr))) { "invalid" } else { "" }
    }

    /// The whole document replaced (a generated model, a scenario started from).
    pub fn replace(self, value: Value) {
        self.edit(|d| *d = value);
    }

    /// What the JSON view's text area was given: the document when it parses as an object.
    fn typed(self, text: String) {
        let parsed = serde_json::from_str::<Value>(&text);
        self.text.set(text);
        match parsed {
            Ok(v) if v.is_object() => {
                self.value.set(v);
                self.text_error.set(None);
                self.refused.set(None);
            }
            Ok(_) => self.text_error.set(Some(ctx().tr("new.jsonNotObject").into())),
            Err(e) => self.text_error.set(Some(e.to_string())),
        }
    }

    /// The text at `ptr` (tracked: a field showing it follows the document).
    pub fn text(self, ptr: &str) -> String {
        self.value.with(|d| text_at(d, ptr))
    }

    /// Selects, in the JSON view, the line where the value at `path` (a validator's or a
    /// refusal's JSON path) starts; the text is printed afresh first so the line is right.
    pub fn show_path(self, path: &str) {
        let (text, line) = self.value.with_untracked(|d| (pretty(d), line_of_path(d, path)));
        self.text.set(text.clone());
        self.text_error.set(None);
        let Some(area) = self.area.get_untracked() else { return };
        let area: &web_sys::HtmlTextAreaElement = area.unchecked_ref();
        area.set_value(&text);
        let (start, end) = line_span(&text, line);
        let _ = area.focus();
        let _ = area.set_selection_range(start as u32, end as u32);
        // About 17 px a line (12 px type, 1.4 leading): the line a few lines below the top.
        area.set_scroll_top(((line.saturating_sub(4)) as f64 * 16.8) as i32);
        let _ = area.set_attribute("data-marked-line", &line.to_string());
    }
}

/// The JSON view of a document: editable; a parse error shows under it and changes nothing.
#[component]
fn JsonPane(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    view! {
        <section class="panel new-json">
            <h3>{move || ctx.tr("new.json")}</h3>
            <textarea
                id="doc-json"
                spellcheck="false"
                node_ref=doc.area
                prop:value=move || doc.text.get()
                on:input=move |ev| doc.typed(event_target_value(&ev))
            ></textarea>
            {move || doc.text_error.get().map(|e| view! { <p id="json-error" class="error">{e}</p> })}
        </section>
    }
}

/// A labelled text input bound to one place of the document (`multi`: a text area).
pub(super) fn text_field(doc: Doc, id: String, label: &'static str, ptr: String, multi: bool) -> impl IntoView {
    let shown = ptr.clone();
    let marked = ptr.clone();
    let class = move || doc.field_class(&marked);
    let write = move |ev: web_sys::Event| {
        let v = event_target_value(&ev);
        doc.edit(|d| set_at(d, &ptr, draft::text_value(&v)));
    };
    let control = if multi {
        view! { <textarea id=id.clone() class=class prop:value=move || doc.text(&shown) on:input=write></textarea> }
            .into_any()
    } else {
        view! { <input id=id.clone() class=class prop:value=move || doc.text(&shown) on:input=write /> }.into_any()
    };
    labelled(label, id, control)
}

/// A labelled list of strings at one place of the document: comma-separated names in a text
/// input, or one a line in a text area (`lines`); empty ones are left out.
pub(super) fn list_field(
    doc: Doc,
    id: &'static str,
    label: &'static str,
    ptr: &'static str,
    lines: bool,
) -> impl IntoView {
    let shown = move || doc.value.with(|d| if lines { draft::lines_of(d, ptr) } else { draft::names_of(d, ptr) });
    let write = move |ev: web_sys::Event| {
        let v = event_target_value(&ev);
        let list = if lines { draft::lines_value(&v) } else { draft::names_value(&v) };
        doc.edit(|d| set_at(d, ptr, Some(list)));
    };
    let control = if lines {
        view! { <textarea id=id prop:value=shown on:change=write></textarea> }.into_any()
    } else {
        view! { <input id=id prop:value=shown on:change=write /> }.into_any()
    };
    labelled(label, id, control)
}

/// A labelled choice among `options`, the one `current` gives selected; a change is written to
/// the document by `set`.
pub(super) fn choice_field(
    doc: Doc,
    id: &'static str,
    label: &'static str,
    options: impl IntoIterator<Item = &'static str>,
    current: impl Fn() -> String + Copy + Send + Sync + 'static,
    set: fn(&mut Value, &str),
) -> impl IntoView {
    let ctx = ctx();
    let options = options
        .into_iter()
        .map(|o| view! { <option value=o selected=move || current() == o>{o}</option> })
        .collect_view();
    view! {
        <div class="row">
            <label for=id>{move || ctx.tr(label)}</label>
            <select id=id on:change=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set(d, &v)) }>
                {options}
            </select>
        </div>
    }
}

/// A labelled number input bound to one place of the document.
pub(super) fn number_field(doc: Doc, id: &'static str, label: &'static str, ptr: &'static str) -> impl IntoView {
    let ctx = ctx();
    view! {
        <label for=id>{move || ctx.tr(label)}</label>
        <input id=id type="number" min="0" class=move || doc.field_class(ptr) prop:value=move || doc.text(ptr)
            on:input=move |ev| { let v = event_target_value(&ev); doc.edit(|d| set_at(d, ptr, draft::number_value(&v))) } />
    }
}

/// The kinds, in the order the picker shows them, with their i18n keys.
const KINDS: [(SimKind, &str, &str); 3] = [
    (SimKind::Social, "kind.social", "new.socialDesc"),
    (SimKind::Trading, "kind.trading", "new.tradingDesc"),
    (SimKind::Abm, "kind.abm", "new.abmDesc"),
];

#[component]
pub fn NewPage() -> impl IntoView {
    let ctx = ctx();
    set_title("New · simtree");
    let kept = kept::Kept::read();
    let [social, trading, abm] = kept.texts;
    let docs = [
        Doc::restored(draft::social_template(), social),
        Doc::restored(draft::trading_template(), trading),
        Doc::restored(Value::Object(Default::default()), abm),
    ];
    let doc_of = move |k: SimKind| match k {
        SimKind::Social => docs[0],
        SimKind::Trading => docs[1],
        SimKind::Abm => docs[2],
    };
    let kind = Memo::new(move |_| match ctx.route.get() {
        Route::New { kind, .. } => kind,
        _ => None,
    });
    let library = RwSignal::new(Vec::<ScenarioSummary>::new());
    let reload = Callback::new(move |()| {
        leptos::task::spawn_local(async move {
            match api::scenarios().await {
                Ok(list) => {
                    library.try_set(list);
                }
                Err(e) => ctx.error(e),
            }
        })
    });
    reload.run(());
    // The library name the page saves under; a scenario started from fills it in.
    let save_name = RwSignal::new(kept.save_name);
    let from_error = RwSignal::new(None::<String>);
    // The library scenario (and version) the editor was started from, with every version kept.
    let origin = RwSignal::new(kept.origin);
    // The prompt layout the tree is to have: state last, or the default (a tree started from
    // keeps its own).
    let state_last = RwSignal::new(false);
    // Every edit is kept for the tab (another page, a reload).
    Effect::new(move |_| {
        kept::Kept { texts: docs.map(|d| Some(d.text.get())), save_name: save_name.get(), origin: origin.get() }.write()
    });
    let start_from = move |id: String| {
        from_error.set(None);
        leptos::task::spawn_local(async move {
            match api::library_scenario(&id).await {
                Ok(s) => {
                    let k = kind_of(&s.document).unwrap_or(s.kind);
                    origin.set(Some(Origin {
                        reference: match s.origin {
                            ScenarioOrigin::Saved => format!("{}@{}", s.id, s.version),
                            ScenarioOrigin::Shipped => s.id.clone(),
                        },
                        id: s.id.clone(),
                        version: s.version,
                        versions: match s.origin {
                            ScenarioOrigin::Saved => s.versions.clone(),
                            ScenarioOrigin::Shipped => Vec::new(),
                        },
                        document: s.document.clone(),
                    }));
                    doc_of(k).replace(s.document);
                    // A saved scenario is saved again as its next version; a shipped one, never.
                    save_name.set(match s.origin {
                        ScenarioOrigin::Saved => s.id,
                        ScenarioOrigin::Shipped => format!("{}_copy", s.id),
                    });
                    ctx.navigate(Route::New { kind: Some(k), from: None });
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(ApiError::NotFound(_)) => from_error.set(Some(ctx.tr("new.fromMissing").replace("{{id}}", &id))),
                Err(e) => from_error.set(Some(format!("{id}: {e}"))),
            }
        });
    };
    // A tree's own document: the one it was made from, or its library scenario at its version.
    let start_from_tree = move |t: u64| {
        from_error.set(None);
        leptos::task::spawn_local(async move {
            match api::tree_info(t).await {
                Ok(info) => {
                    state_last.set(info.prompt_layout == Some(PromptLayout::StateLast));
                    match info.document {
                        Some(document) => {
                            let k = kind_of(&document).unwrap_or(info.kind);
                            origin.set(None);
                            doc_of(k).replace(document);
                            ctx.navigate(Route::New { kind: Some(k), from: None });
                        }
                        None => start_from(match info.scenario_version {
                            Some(v) => format!("{}@{v}", info.scenario),
                            None => info.scenario,
                        }),
                    }
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(e) => from_error.set(Some(format!("{} {t}: {e}", ctx.tr("tree.label")))),
            }
        });
    };
    // An address `/new?from=ID` (a deep link, or back to one) starts from that scenario.
    let from = Memo::new(move |_| match ctx.route.get() {
        Route::New { from, .. } => from,
        _ => None,
    });
    Effect::new(move |_| match from.get() {
        Some(Start::Library(id)) => start_from(id),
        Some(Start::Tree(t)) => start_from_tree(t),
        None => {}
    });
    let picked = RwSignal::new(String::new());
    let form = move || match kind.get() {
        None => view! { <KindPicker /> }.into_any(),
        Some(k) => {
            let doc = doc_of(k);
            let form = match k {
                SimKind::Social => view! { <social::SocialForm doc /> }.into_any(),
                SimKind::Trading => view! { <trading::TradingForm doc /> }.into_any(),
                SimKind::Abm => view! { <abm::AbmForm doc /> }.into_any(),
            };
            view! {
                <div class="new-grid">
                    <div class="new-col">{form}</div>
                    <div class="new-col">
                        <JsonPane doc />
                        <Actions doc save_name origin state_last on_saved=reload />
                        <Show when=move || k == SimKind::Social>
                            <PromptPreview doc />
                        </Show>
                    </div>
                </div>
            }
            .into_any()
        }
    };
    view! {
        <div id="new-page" class="page new">
            <nav class="new-kinds">
                {KINDS
                    .iter()
                    .map(|(k, name, _)| {
                        let k = *k;
                        view! {
                            <a
                                id=format!("new-kind-{}", crate::route::kind_name(k))
                                class=move || if kind.get() == Some(k) { "kind-tab active" } else { "kind-tab" }
                                href=Route::New { kind: Some(k), from: None }.href()
                                on:click=move |ev: web_sys::MouseEvent| {
                                    ev.prevent_default();
                                    ctx.navigate(Route::New { kind: Some(k), from: None });
                                }
                            >
                                {move || ctx.tr(name)}
                            </a>
                        }
                    })
                    .collect_view()}
                <span class="spacer"></span>
                <label for="start-from">{move || ctx.tr("new.startFrom")}</label>
                <select id="start-from" on:change=move |ev| picked.set(event_target_value(&ev))>
                    <option value="" selected=move || picked.get().is_empty()>"—"</option>
                    <For
                        each=move || library.get()
                        key=|s| s.id.clone()
                        children=move |s: ScenarioSummary| {
                            let id = s.id.clone();
                            let origin = match (s.origin, s.version) {
                                (ScenarioOrigin::Saved, Some(v)) => ctx.tr("new.originSaved").replace("{{v}}", &v.to_string()),
                                (ScenarioOrigin::Saved, None) => ctx.tr("new.originSaved").replace(" v{{v}}", ""),
                                (ScenarioOrigin::Shipped, _) => ctx.tr("new.originShipped").to_string(),
                            };
                            let label = format!("{} — {} ({}, {origin})", s.id, s.title, crate::route::kind_name(s.kind));
                            view! { <option value=id.clone() selected=move || picked.get() == id>{label}</option> }
                        }
                    />
                </select>
                <button id="start-from-btn" disabled=move || picked.get().is_empty() on:click=move |_| start_from(picked.get_untracked())>
                    {move || ctx.tr("new.copy")}
                </button>
                // A saved scenario's versions: the one shown, and any other to start from.
                <Show when=move || origin.with(|o| o.as_ref().is_some_and(|o| !o.versions.is_empty()))>
                    <label for="start-version">{move || ctx.tr("new.version")}</label>
                    <select id="start-version" on:change=move |ev| {
                        let v = event_target_value(&ev);
                        if let Some(id) = origin.with_untracked(|o| o.as_ref().map(|o| o.id.clone())) {
                            start_from(format!("{id}@{v}"));
                        }
                    }>
                        {move || origin.with(|o| {
                            let Some(o) = o else { return Vec::new() };
                            o.versions
                                .iter()
                                .map(|v| view! { <option value=v.to_string() selected=*v == o.version>{format!("v{v}")}</option> })
                                .collect::<Vec<_>>()
                        })}
                    </select>
                </Show>
            </nav>
            {move || from_error.get().map(|e| view! { <p id="start-from-error" class="error">{e}</p> })}
            {form}
        </div>
    }
}

/// The library scenario the editor was started from: made into a tree by name (`id@version`)
/// while the document is still exactly its, so the tree records where it came from.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct Origin {
    /// What `POST /devui/simtree` names it by: `id@version` (saved) or `id` (shipped).
    reference: String,
    id: String,
    version: u64,
    /// Every version kept of a saved scenario (none for a shipped one).
    versions: Vec<u64>,
    document: Value,
}

/// `/new` without a kind: what each kind is, to pick one.
#[component]
fn KindPicker() -> impl IntoView {
    let ctx = ctx();
    view! {
        <div class="home" id="kind-picker">
            {KINDS
                .iter()
                .map(|(k, name, desc)| {
                    view! {
                        <div class="card">
                            <h2><Link route=Route::New { kind: Some(*k), from: None }>{move || ctx.tr(name)}</Link></h2>
                            <p>{move || ctx.tr(desc)}</p>
                        </div>
                    }
                })
                .collect_view()}
        </div>
    }
}

/// The JSON path a refusal names, with a button that marks it in the JSON view.
fn refusal_view(doc: Doc, id: &'static str, detail: String) -> impl IntoView {
    let ctx = ctx();
    let path = refusal_path(&detail);
    view! {
        <div id=id class="reason">
            {detail}
            {path.map(|p| {
                view! {
                    " "
                    <button class="ghost show-path" on:click=move |_| doc.show_path(&p)>{move || ctx.tr("new.showInJson")}</button>
                }
            })}
        </div>
    }
}

/// Create tree and save to library, for every kind.
#[component]
fn Actions(
    doc: Doc,
    save_name: RwSignal<String>,
    origin: RwSignal<Option<Origin>>,
    state_last: RwSignal<bool>,
    on_saved: Callback<()>,
) -> impl IntoView {
    let ctx = ctx();
    let tree_name = RwSignal::new(String::new());
    let seed = RwSignal::new(String::new());
    let llm = RwSignal::new(super::create::MOCK.to_string());
    let money = RwSignal::new(String::new());
    let creating = RwSignal::new(false);
    let create_error = RwSignal::new(None::<String>);
    // What the JSON view holds is not the document: nothing is made or saved from a stale one.
    let blocked = move || doc.text_error.with(Option::is_some);
    // The library scenario the tree is made from: the one started from, while unedited.
    let from_library = move || {
        origin.with(|o| o.as_ref().filter(|o| doc.value.with(|d| *d == o.document)).map(|o| o.reference.clone()))
    };
    let social = move || doc.value.with(|d| kind_of(d) == Some(SimKind::Social));
    let money_error = move || {
        let m = money.get();
        let m = m.trim();
        (!m.is_empty() && m.parse::<f64>().ok().is_none_or(|v| !v.is_finite() || v < 0.0))
            .then(|| ctx.tr("new.moneyInvalid"))
    };
    let create = move |_| {
        if blocked() || money_error().is_some() {
            return;
        }
        let body = CreateRequest {
            scenario: match from_library() {
                Some(reference) => ScenarioSource::Name(reference),
                None => ScenarioSource::Document(doc.value.get_untracked()),
            },
            name: Some(tree_name.get_untracked().trim().to_string()).filter(|n| !n.is_empty()),
            seed: seed.get_untracked().trim().parse().ok(),
            token_budget: None,
            money_budget: money.get_untracked().trim().parse().ok(),
            llm: super::create::create_llm(llm.get_untracked()).filter(|_| social()),
            prompt_layout: (state_last.get_untracked() && social()).then_some(PromptLayout::StateLast),
        };
        creating.set(true);
        create_error.set(None);
        leptos::task::spawn_local(async move {
            let r = api::create_tree(&body).await;
            creating.try_set(false);
            match r {
                Ok(t) => {
                    api::storage_set("devui:lastTreeId", &t.id.to_string());
                    ctx.navigate(Route::SimTree(Some(t.id)));
                }
                Err(ApiError::Offline) => ctx.went_offline(),
                Err(ApiError::Http(_, body) | ApiError::NotFound(body)) => {
                    doc.refused.try_set(refusal_path(&body.detail).map(|p| draft::path_pointer(&p)));
                    create_error.try_set(Some(body.detail));
                }
                Err(e) => {
                    create_error.try_set(Some(e.to_string()));
                }
            }
        });
    };
    // Saving: the outcome, and the saved scenario a 409 found under the name (to save a version).
    let saved = RwSignal::new(None::<String>);
    let save_error = RwSignal::new(None::<String>);
    let taken = RwSignal::new(false);
    let saving = RwSignal::new(false);
    let save = move |new_version: bool| {
        if blocked() {
            return;
        }
        let name = save_name.get_untracked().trim().to_string();
        let document = doc.value.get_untracked();
        saving.set(true);
        saved.set(None);
        save_error.set(None);
        leptos::task::spawn_local(async move {
            let r = if new_version {
                api::update_scenario(&name, &document).await
            } else {
                api::save_scenario(&name, &document).await
            };
            saving.try_set(false);
            taken.try_set(false);
            match r {
                Ok(s) => {
                    let text =
                        ctx.tr("new.saved").replace("{{id}}", &s.id).replace("{{version}}", &s.version.to_string());
                    saved.try_set(Some(text));
                    // The editor now holds that version: its label, list and Create follow.
                    origin.try_update(|o| *o = Some(Origin::saved(o.take(), &s, document)));
                    on_saved.run(());
                }
                // The name is taken: say what to do (the server's text names its API route).
                Err(ApiError::Http(409, _)) if !new_version => {
                    taken.try_set(true);
                    save_error.try_set(Some(ctx.tr("new.nameTaken").replace("{{id}}", &name)));
                }
                Err(e) => {
                    if let Some(m) = ctx.refusal(e) {
                        save_error.try_set(Some(m));
                    }
                }
            }
        });
    };
    let placeholder = move || doc.value.with(title_of);
    view! {
        <section id="new-actions" class="panel">
            <h3>{move || ctx.tr("new.createTitle")}</h3>
            <div class="row">
                <label for="tree-name-input">{move || ctx.tr("trees.name")}</label>
                <input id="tree-name-input" maxlength="200" placeholder=placeholder prop:value=move || tree_name.get()
                    on:input=move |ev| tree_name.set(event_target_value(&ev)) />
                <label for="new-seed">{move || ctx.tr("create.seed")}</label>
                <input id="new-seed" type="number" min="0" placeholder="0" prop:value=move || seed.get()
                    on:input=move |ev| seed.set(event_target_value(&ev)) />
            </div>
            <Show when=social>
                {super::create::player_field("new-llm", "new-llm-note", llm)}
                <div class="field">
                    <label for="new-layout">{move || ctx.tr("new.layout")}</label>
                    <select id="new-layout" on:change=move |ev| state_last.set(event_target_value(&ev) == "state_last")>
                        <option value="upstream" selected=move || !state_last.get()>{move || ctx.tr("new.layoutUpstream")}</option>
                        <option value="state_last" selected=move || state_last.get()>{move || ctx.tr("new.layoutStateLast")}</option>
                    </select>
                    <p id="new-layout-note" class="hint muted">{move || ctx.tr("new.layoutNote")}</p>
                </div>
            </Show>
            <div class="row">
                <label for="new-money">{move || ctx.tr("new.money")}</label>
                <input id="new-money" inputmode="decimal" placeholder="∞" prop:value=move || money.get()
                    on:input=move |ev| money.set(event_target_value(&ev)) />
            </div>
            {move || money_error().map(|e| view! { <p id="money-error" class="error">{e}</p> })}
            <p id="create-source" class="hint muted">
                {move || match from_library() {
                    Some(r) => ctx.tr("new.fromLibrary").replace("{{ref}}", &r),
                    None => ctx.tr("new.fromDocument").to_string(),
                }}
            </p>
            <CheckLine doc />
            <div class="row">
                <button id="create-tree" class="primary" disabled=move || creating.get() || blocked() || money_error().is_some() on:click=create>
                    {move || ctx.tr("new.createTree")}
                </button>
                <Show when=move || creating.get()>
                    <span id="create-progress" class="muted">{move || ctx.tr("new.creating")}</span>
                </Show>
            </div>
            {move || blocked().then(|| view! { <p id="create-blocked" class="reason">{move || ctx.tr("new.jsonBlocks")}</p> })}
            {move || create_error.get().map(|e| refusal_view(doc, "create-error", e))}
            <h3>{move || ctx.tr("new.library")}</h3>
            <div class="row">
                <label for="save-name">{move || ctx.tr("new.saveName")}</label>
                <input id="save-name" maxlength="64" placeholder="my_scenario" prop:value=move || save_name.get()
                    on:input=move |ev| save_name.set(event_target_value(&ev)) />
                <button id="save-library" disabled=move || saving.get() || blocked() || save_name.get().trim().is_empty() on:click=move |_| save(false)>
                    {move || ctx.tr("new.save")}
                </button>
            </div>
            <p class="hint muted">{move || ctx.tr("new.saveHint")}</p>
            <library::SavedEntry origin on_deleted=on_saved />
            {move || saved.get().map(|s| view! { <p id="save-done" class="ok">{s}</p> })}
            {move || save_error.get().map(|e| refusal_view(doc, "save-error", e))}
            <Show when=move || taken.get()>
                <button id="save-version" disabled=blocked on:click=move |_| save(true)>{move || ctx.tr("new.saveVersion")}</button>
            </Show>
        </section>
    }
}

/// The document checked by the server as it is edited (`POST /api/documents/check`, a moment
/// after the last edit): a tree could be made of it, or the refusal at its JSON path, marked on
/// the form field that shows that place.
#[component]
fn CheckLine(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    let verdict = RwSignal::new(None::<Result<(), String>>);
    ask_after_edits(
        doc,
        || true,
        api::check_document,
        move |answer| match answer {
            Ok(_) => {
                doc.refused.try_set(None);
                verdict.try_set(Some(Ok(())));
            }
            Err(ApiError::Http(_, body) | ApiError::NotFound(body)) => {
                let path = body.path.clone().or_else(|| refusal_path(&body.detail));
                doc.refused.try_set(path.map(|p| draft::path_pointer(&p)));
                verdict.try_set(Some(Err(body.detail)));
            }
            Err(ApiError::Offline) => ctx.went_offline(),
            Err(e) => {
                verdict.try_set(Some(Err(e.to_string())));
            }
        },
    );
    view! {
        {move || match (doc.text_error.get(), verdict.get()) {
            (Some(_), _) | (None, None) => ().into_any(),
            (None, Some(Ok(()))) => view! { <p id="check-ok" class="ok">{move || ctx.tr("new.checkOk")}</p> }.into_any(),
            (None, Some(Err(e))) => refusal_view(doc, "check-error", e).into_any(),
        }}
    }
}

/// How long after the last edit the document is checked, in milliseconds.
const CHECK_AFTER_MS: i32 = 400;

/// Asks the server about the document (`ask`) a moment after each edit while `on` holds and the
/// JSON view parses, and hands `answer` only a reply about the document still shown.
fn ask_after_edits<T, Fut>(
    doc: Doc,
    on: impl Fn() -> bool + 'static,
    ask: fn(Value) -> Fut,
    answer: impl Fn(Result<T, ApiError>) + Copy + 'static,
) where
    T: 'static,
    Fut: std::future::Future<Output = Result<T, ApiError>> + 'static,
{
    let edits = StoredValue::new(0u64);
    Effect::new(move |_| {
        let document = doc.value.get();
        if !on() || doc.text_error.with_untracked(Option::is_some) {
            return;
        }
        edits.update_value(|n| *n += 1);
        let mine = edits.get_value();
        leptos::task::spawn_local(async move {
            api::sleep(CHECK_AFTER_MS).await;
            if edits.try_get_value() != Some(mine) {
                return;
            }
            let reply = ask(document.clone()).await;
            if edits.try_get_value() != Some(mine) || doc.value.try_with_untracked(|d| *d != document) != Some(false) {
                return;
            }
            answer(reply);
        });
    });
}

/// What each role of a social document reads on its first turn (`POST /api/documents/preview`),
/// fetched on request and again after each edit while shown.
#[component]
fn PromptPreview(doc: Doc) -> impl IntoView {
    let ctx = ctx();
    let shown = RwSignal::new(false);
    let prompts = RwSignal::new(Vec::<RolePrompt>::new());
    let error = RwSignal::new(None::<String>);
    ask_after_edits(
        doc,
        move || shown.get(),
        api::preview_document,
        move |answer| match answer {
            Ok(p) => {
                prompts.try_set(p);
                error.try_set(None);
            }
            Err(e) => {
                if let Some(m) = ctx.refusal(e) {
                    error.try_set(Some(m));
                }
            }
        },
    );
    view! {
        <section id="prompt-preview" class="panel">
            <h3>{move || ctx.tr("new.preview")}</h3>
            <Show when=move || !shown.get()>
                <button id="preview-prompts" on:click=move |_| shown.set(true)>{move || ctx.tr("new.previewShow")}</button>
            </Show>
            <Show when=move || shown.get()>
                <p class="hint muted">{move || ctx.tr("new.previewHint")}</p>
                {move || error.get().map(|e| view! { <p id="preview-error" class="reason">{e}</p> })}
                {move || prompts.get().into_iter().map(|p: RolePrompt| {
                        let who = match (&p.role, p.also.is_empty()) {
                            (Some(r), true) => format!("{r}: {}", p.agent),
                            (Some(r), false) => format!("{r}: {} (+ {})", p.agent, p.also.join(", ")),
                            (None, _) => p.agent.clone(),
                        };
                        let role = p.role.clone().unwrap_or_else(|| p.agent.clone());
                        view! {
                            <details class="role-prompt" data-role=role>
                                <summary>{who}</summary>
                                {p.messages
                                    .into_iter()
                                    .map(|m| view! { <div class="prompt-message"><strong>{m.role}</strong><pre>{m.content}</pre></div> })
                                    .collect_view()}
                            </details>
                        }
                    }).collect_view()}
            </Show>
        </section>
    }
}
