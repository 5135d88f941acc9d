//! The selected node's notes: its title (the graph's label for it), a note, tags and a star.
//! Each field is saved on its own when it is committed (Enter or leaving it; the star on a
//! click) with `PATCH …/node/{n}` naming that field only, so the server's refusal ("title must be
//! at most 200 characters") is shown under the field it is about, and a field that did not
//! change sends nothing. What the server answers is what the form then shows (its trimming, its
//! merged tags) and what the graph draws.

use leptos::prelude::*;
use simtree_shared::{Annotation, NodePatch};

use crate::api;
use crate::notebook::{parse_tags, tags_text};
use crate::state::{Tree, ctx};

/// One field of the form.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Title,
    Note,
    Tags,
    Star,
}

/// The form's fields and what the server last said of each.
#[derive(Clone, Copy)]
struct Form {
    title: RwSignal<String>,
    note: RwSignal<String>,
    tags: RwSignal<String>,
    /// The annotation as stored: what a field is compared with before it is sent.
    stored: RwSignal<Annotation>,
    errors: RwSignal<Vec<(Field, String)>>,
}

impl Form {
    fn show(self, a: Annotation) {
        self.title.set(a.title.clone().unwrap_or_default());
        self.note.set(a.note.clone().unwrap_or_default());
        self.tags.set(tags_text(&a.tags));
        self.stored.set(a);
    }

    fn error(self, field: Field) -> Option<String> {
        self.errors.with(|e| e.iter().find(|(f, _)| *f == field).map(|(_, m)| m.clone()))
    }

    fn set_error(self, field: Field, message: Option<String>) {
        self.errors.update(|e| {
            e.retain(|(f, _)| *f != field);
            e.extend(message.map(|m| (field, m)));
        });
    }

    /// The patch that commits `field`, or `None` when it holds what is stored.
    fn patch(self, field: Field) -> Option<NodePatch> {
        let stored = self.stored.get_untracked();
        let text = |s: RwSignal<String>, was: &Option<String>| {
            let now = s.get_untracked();
            (now != was.clone().unwrap_or_default()).then_some(now)
        };
        match field {
            Field::Title => text(self.title, &stored.title).map(|t| NodePatch { title: Some(t), ..Default::default() }),
            Field::Note => text(self.note, &stored.note).map(|n| NodePatch { note: Some(n), ..Default::default() }),
            Field::Tags => {
                let tags = parse_tags(&self.tags.get_untracked());
                (tags != stored.tags).then_some(NodePatch { tags: Some(tags), ..Default::default() })
            }
            Field::Star => Some(NodePatch { starred: Some(!stored.starred), ..Default::default() }),
        }
    }
}

/// Title, note, tags and star of the selected node.
#[component]
pub fn NotePanel(tree: Tree) -> impl IntoView {
    let ctx = ctx();
    let form = Form {
        title: RwSignal::new(String::new()),
        note: RwSignal::new(String::new()),
        tags: RwSignal::new(String::new()),
        stored: RwSignal::new(Annotation::default()),
        errors: RwSignal::new(Vec::new()),
    };
    // The node the form is about: its fields are saved to it even when the selection has moved
    // on (leaving a field by clicking another node commits it first).
    let shown = RwSignal::new(None::<(u64, u64)>);
    // Read when the selection changes (not on every tree message: that would undo typing).
    Effect::new(move |_| {
        let (Some(t), Some(n)) = (tree.id.get(), tree.selected.get()) else {
            return;
        };
        if shown.try_get_untracked() == Some(Some((t, n))) {
            return;
        }
        shown.set(None);
        form.errors.set(Vec::new());
        form.show(Annotation::default());
        leptos::task::spawn_local(async move {
            if let Ok(info) = api::node_info(t, n).await
                && tree.selected.get_untracked() == Some(n)
            {
                form.show(info.annotation.unwrap_or_default());
                shown.set(Some((t, n)));
            }
        });
    });
    // An edit from any window (this one's own included, which changes nothing): the fields
    // not being typed in (still holding what was stored) take the new values.
    Effect::new(move |_| {
        let Some((n, a)) = tree.noted.get() else { return };
        let Some((_, shown_node)) = shown.get_untracked() else {
            return;
        };
        if shown_node != n {
            return;
        }
        let was = form.stored.get_untracked();
        let keep = |s: RwSignal<String>, old: String, new: String| {
            if s.get_untracked() == old {
                s.set(new);
            }
        };
        keep(form.title, was.title.clone().unwrap_or_default(), a.title.clone().unwrap_or_default());
        keep(form.note, was.note.clone().unwrap_or_default(), a.note.clone().unwrap_or_default());
        keep(form.tags, tags_text(&was.tags), tags_text(&a.tags));
        form.stored.set(a);
    });
    let save = move |field: Field| {
        let Some((t, n)) = shown.get_untracked() else { return };
        let Some(patch) = form.patch(field) else {
            form.set_error(field, None);
            return;
        };
        leptos::task::spawn_local(async move {
            match api::annotate(t, n, &patch).await {
                Ok(info) => {
                    tree.marks.update(|m| m.set(n, info.annotation.as_ref()));
                    form.set_error(field, None);
                    if shown.try_get_untracked() == Some(Some((t, n))) {
                        let now = info.annotation.unwrap_or_default();
                        // The server's form of the saved field (trimmed, tags merged); the other
                        // fields keep what is being typed in them.
                        match field {
                            Field::Title => form.title.set(now.title.clone().unwrap_or_default()),
                            Field::Note => form.note.set(now.note.clone().unwrap_or_default()),
                            Field::Tags => form.tags.set(tags_text(&now.tags)),
                            Field::Star => {}
                        }
                        form.stored.set(now);
                    }
                }
                Err(e) => form.set_error(field, ctx.refusal(e)),
            }
        });
    };
    let error = move |field: Field, id: &'static str| {
        move || form.error(field).map(|e| view! { <p id=id class="error field-error">{e}</p> })
    };
    // A text field (the note's is several lines): typed into its signal, saved when committed,
    // its refusal under it as `#<id>-error`.
    let text_field = move |field: Field, text: RwSignal<String>, id: &'static str, [label, hint]: [&'static str; 2]| {
        let on_input = move |ev: web_sys::Event| text.set(event_target_value(&ev));
        let on_change = move |ev: web_sys::Event| {
            text.set(event_target_value(&ev));
            save(field);
        };
        let placeholder = move || ctx.tr(hint);
        let control = if field == Field::Note {
            view! { <textarea id=id placeholder=placeholder prop:value=move || text.get() on:input=on_input on:change=on_change></textarea> }
                .into_any()
        } else {
            view! { <input id=id type="text" placeholder=placeholder prop:value=move || text.get() on:input=on_input on:change=on_change /> }
                .into_any()
        };
        let error_id: &'static str = match field {
            Field::Title => "note-title-error",
            Field::Note => "note-text-error",
            _ => "note-tags-error",
        };
        view! {
            <div class="field">
                <label for=id>{move || ctx.tr(label)}</label>
                {control}
                {error(field, error_id)}
            </div>
        }
    };
    let starred = move || form.stored.with(|a| a.starred);
    view! {
        <section id="notes" class="panel notes">
            <h3>
                {move || ctx.tr("notebook.notes")}
                <button
                    id="note-star"
                    class=move || if starred() { "ghost star on" } else { "ghost star" }
                    title=move || ctx.tr(if starred() { "notebook.unstar" } else { "notebook.star" })
                    aria-pressed=move || starred().to_string()
                    disabled=move || shown.get().is_none()
                    on:click=move |_| save(Field::Star)
                >
                    {move || if starred() { "★" } else { "☆" }}
                </button>
            </h3>
            {error(Field::Star, "note-star-error")}
            {text_field(Field::Title, form.title, "note-title", ["notebook.title", "notebook.titleHint"])}
            {text_field(Field::Note, form.note, "note-text", ["notebook.note", "notebook.noteHint"])}
            {text_field(Field::Tags, form.tags, "note-tags", ["notebook.tags", "notebook.tagsHint"])}
        </section>
    }
}
